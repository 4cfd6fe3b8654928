"""The lock in layers, on the real engine and through a real registry on loopback, with real uv and PyPI.

One small entry has a package in each group (nvidia-nvtx with torch's runtime, torchao in the deployment
stack, mpmath in the numeric one, six in the rest). It is built, then rebuilt after one small pin moves
(six 1.17.0 -> 1.16.0): the three groups the change leaves alone are reused and only the rest is built; the
push of the new image moves only its small layers; a fresh runner (no image, no build cache but uv's
downloads) builds the same change from the registry's layers, pulling the three and building one. The layered
environment equals a one-step install of the same lock, and no file is written by two dependency layers
(bytecode included).
"""

from __future__ import annotations

import json
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import pytest

from tests.integration.conftest import PROJECT, LoopbackRegistry, one_entry_matrix, remove_images
from torchyard.image.outcome import Built
from torchyard.image.plan import BuildOptions, image_repository
from torchyard.lock.resolve import lock_entry
from torchyard.matrix import parse_plan
from torchyard.matrix.machine import load_machine
from torchyard.matrix.schema import Entry
from torchyard.pipeline import build_images

pytestmark = pytest.mark.integration

ENTRY = "layers-test"
DEBIAN = (
    "docker.io/library/debian:bookworm-slim@sha256:7802002798b0e351323ed2357ae6dc5a8c4d0a05a57e7f4d8f97136151d3d603"
)


def _locked(six: str, lockdir: Path) -> Entry:
    requirements = ["nvidia-nvtx==13.0.85", "torchao==0.18.0", "mpmath==1.3.0", f"six=={six}"]
    entry = parse_plan(one_entry_matrix(ENTRY, DEBIAN, requirements), Path("matrix.toml")).entries[0]
    lock_entry(entry, lockdir, {})
    return entry


def _how(built: Built) -> dict[str, str]:
    return {layer.group: layer.how for layer in built.layers}


# Compares the image's venv with a one-step install of its lock into a fresh venv made the same way at the
# same path (scripts carry their venv's path in their shebang, and RECORD hashes them).
ONE_STEP = r"""
set -e
mv /opt/torchyard/venv /opt/torchyard/layered
python3.11 /opt/torchyard/vendor.py venv /opt/torchyard/venv --record /opt/torchyard/vendor.json
/opt/torchyard/tools/bin/uv pip install --quiet --python /opt/torchyard/venv/bin/python --no-deps --no-config \
    --require-hashes --compile-bytecode -r /opt/torchyard/lock.txt
/opt/torchyard/venv/bin/python - <<'PY'
import json, pathlib
def tree(root):
    site = next(pathlib.Path(root).glob("lib/python3.*/site-packages"))
    files = sorted(str(p.relative_to(site)) for p in site.rglob("*") if p.is_file() and p.name != "torchyard.pth")
    records = {p.parent.name: p.read_text() for p in site.glob("*.dist-info/RECORD")}
    return {"files": files, "records": records}
print(json.dumps({"layered": tree("/opt/torchyard/layered"), "one_step": tree("/opt/torchyard/venv")}))
PY
"""


def _one_step_comparison(client: docker.DockerClient, tag: str) -> dict[str, Any]:
    ca = "/etc/ssl/certs/ca-certificates.crt"
    output = client.containers.run(
        tag, ["/bin/bash", "-c", ONE_STEP], entrypoint=[], user="0", remove=True,
        environment={"SSL_CERT_FILE": "/ca.pem", "UV_NATIVE_TLS": "1"}, volumes={ca: {"bind": "/ca.pem", "mode": "ro"}},
    )  # fmt: skip
    compared: dict[str, Any] = json.loads(output.decode().strip().splitlines()[-1])
    return compared


def _dependency_layer_files(client: docker.DockerClient, tag: str, scratch: Path) -> dict[str, set[str]]:
    """The files each dependency layer writes, read from `docker save` (its image config marks the history
    entries without a layer, so entries and layers line up exactly)."""
    saved = scratch / "image.tar"
    with saved.open("wb") as handle:
        for chunk in client.images.get(tag).save(named=True):
            handle.write(chunk)
    with tarfile.open(saved) as archive:
        (manifest,) = json.load(archive.extractfile("manifest.json"))  # type: ignore[arg-type]
        config = json.load(archive.extractfile(manifest["Config"]))  # type: ignore[arg-type]
        steps = [item.get("created_by", "") for item in config["history"] if not item.get("empty_layer")]
        assert len(steps) == len(manifest["Layers"])
        found: dict[str, set[str]] = {}
        for created_by, layer in zip(steps, manifest["Layers"], strict=True):
            if "bash /opt/torchyard/install-layer.sh " not in created_by or "install-layer.sh --wheels" in created_by:
                continue  # not a dependency layer (the project's wheel is installed by the same script)
            group = created_by.rsplit("install-layer.sh ", 1)[1].split()[0]
            with tarfile.open(fileobj=archive.extractfile(layer)) as inner:
                # uv's empty lock file of the venv is touched by every install (a few bytes of metadata).
                names = {member.name for member in inner.getmembers() if not member.isdir()}
                found[group] = names - {"opt/torchyard/venv/.lock"}
    saved.unlink()
    return found


# Every kind of BuildKit cache record but its cache mounts (uv's download cache, `exec.cachemount`): with
# them gone no layer can be reused from the engine, and what uv downloads decides no layer's reuse. Kept,
# the later tests' builds need not download their wheels again. The engine takes one value per filter key.
BUILD_RECORDS = ("regular", "source.local", "source.git.checkout", "internal", "frontend")


def prune_build_records(client: docker.DockerClient) -> None:
    for kind in BUILD_RECORDS:
        client.api.prune_builds(filters={"type": [kind]}, all=True)  # type: ignore[arg-type]  # stubs: dangling, until
    remaining = [record for record in client.api.df()["BuildCache"] or [] if not record.get("InUse")]
    assert {record["Type"] for record in remaining} <= {"exec.cachemount"}, remaining  # in use: another build's


@pytest.fixture
def clean(client: docker.DockerClient) -> Iterator[None]:
    remove_images(client, f"{image_repository(PROJECT, ENTRY)}:")
    prune_build_records(client)  # the first build starts cold, whatever this machine built before
    yield
    remove_images(client, f"{image_repository(PROJECT, ENTRY)}:")


def test_a_small_pin_change_reuses_every_other_layer_on_the_engine_and_through_the_registry(
    *,
    client: docker.DockerClient,
    registry: LoopbackRegistry,
    machine_env: dict[str, str],
    clean: None,
    tmp_path: Path,
) -> None:
    env = {
        **machine_env,
        "TORCHYARD_MACHINE_FILE": str(tmp_path / "machine.toml"),
        "TORCHYARD_REGISTRY": f"{registry.host}/team",
        "TORCHYARD_REGISTRY_USERNAME": registry.username,
        "TORCHYARD_REGISTRY_PASSWORD": registry.password,
    }
    first_entry = _locked("1.17.0", tmp_path / "first")
    (first,) = build_images(
        [first_entry], tmp_path / "first", BuildOptions(push=True), project=PROJECT, machine=load_machine(env), env=env
    )
    assert _how(first) == {"torch": "built", "pytorch": "built", "numeric": "built", "rest": "built"}
    sizes = {layer.group: layer.size_bytes for layer in first.layers}
    assert sizes["pytorch"] > 10e6 and 0 < sizes["rest"] < 1e6  # torchao's layer, six's
    layered_files = _dependency_layer_files(client, first.tag, tmp_path)
    assert set(layered_files) == {"torch", "pytorch", "numeric", "rest"}
    groups = sorted(layered_files)
    for position, group in enumerate(groups):
        for other in groups[position + 1 :]:
            assert not layered_files[group] & layered_files[other], f"{group} and {other} write the same files"
    assert any(name.endswith("six.cpython-311.pyc") for name in layered_files["rest"])  # compiled in its layer
    assert not any("/torchao/" in name for name in layered_files["rest"])  # earlier groups' bytecode untouched

    compared = _one_step_comparison(client, first.tag)
    assert compared["layered"] == compared["one_step"]
    assert {"six-1.17.0.dist-info", "torchao-0.18.0.dist-info"} <= set(compared["layered"]["records"])

    # One small pin moves: only the rest's layer is built, and the push moves only the new small layers.
    bumped_entry = _locked("1.16.0", tmp_path / "bumped")
    (bumped,) = build_images(
        [bumped_entry],
        tmp_path / "bumped",
        BuildOptions(push=True),
        project=PROJECT,
        machine=load_machine(env),
        env=env,
    )
    assert bumped.tag != first.tag and bumped.origin == "cache"
    assert _how(bumped) == {"torch": "reused", "pytorch": "reused", "numeric": "reused", "rest": "built"}
    pushed = sum(transfer.bytes for transfer in bumped.pushed)
    assert pushed < 5e6 < sum(transfer.bytes for transfer in first.pushed), (pushed, first.pushed)
    shared = set(client.images.get(first.tag).attrs["RootFS"]["Layers"])
    assert (
        len(shared & set(client.images.get(bumped.tag).attrs["RootFS"]["Layers"])) >= 11
    )  # the base, the toolchain, and three groups with their files

    # A fresh runner builds the same change: the three groups come from the registry, the rest is built.
    remove_images(client, f"{image_repository(PROJECT, ENTRY)}:")
    prune_build_records(client)
    third = _locked("1.15.0", tmp_path / "third")
    (fresh,) = build_images(
        [third], tmp_path / "third", BuildOptions(), project=PROJECT, machine=load_machine(env), env=env
    )
    assert _how(fresh) == {"torch": "pulled", "pytorch": "pulled", "numeric": "pulled", "rest": "built"}
