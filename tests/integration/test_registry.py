"""Many runners, one registry: a real registry on loopback (basic auth), the real engine, real uv.

One small entry (a one-package lock on the debootstrapped Debian base) goes through what two runners do:
runner A pulls the base by digest, builds and pushes; a fresh runner B (this entry's images, its base tag
and the whole build cache removed) builds a source-only change from the registry's layers, then pulls an
unchanged image by its content-addressed tag. Credentials come from the environment and must not show up
in any output, label, history entry or layer. `refresh` reads a tag that moved between two pushes.
"""

from __future__ import annotations

import datetime as dt
import io
import os
from collections.abc import Iterator
from pathlib import Path

import docker
import docker.errors
import pytest

from tests.integration.conftest import PROJECT, LoopbackRegistry, one_entry_matrix, remove_images
from torchyard.commands.refresh import refresh
from torchyard.errors import ImageBuildError
from torchyard.image.context import inimage_files
from torchyard.image.plan import BuildOptions, image_repository
from torchyard.lock.resolve import lock_entry
from torchyard.matrix import parse_plan
from torchyard.matrix.machine import load_machine
from torchyard.matrix.schema import Entry
from torchyard.pipeline import build_images

pytestmark = pytest.mark.integration

ENTRY = "registry-test"


def _entry(base: str) -> Entry:
    return parse_plan(one_entry_matrix(ENTRY, base, ["six==1.17.0"]), Path("matrix.toml")).entries[0]


@pytest.fixture(scope="module")
def pushed_base(client: docker.DockerClient, local_base: str, registry: LoopbackRegistry) -> Iterator[str]:
    """The debootstrapped base, pushed to the registry; its registry name is then removed locally."""
    repository = f"{registry.host}/torchyard-test/base"
    client.images.get(local_base).tag(repository, "bookworm")
    events = list(client.api.push(repository, "bookworm", stream=True, decode=True, auth_config=registry.auth))
    assert not [event for event in events if "error" in event], events
    digest = next(event["aux"]["Digest"] for event in events if "aux" in event)
    client.images.remove(f"{repository}:bookworm")
    yield f"{repository}@{digest}"


@pytest.fixture
def runner_env(registry: LoopbackRegistry, tmp_path: Path) -> dict[str, str]:
    """A runner's environment: the machine's registry and its credentials, no base override."""
    env = {key: value for key, value in os.environ.items() if key != "TORCHYARD_BASE_IMAGES"}
    return {
        **env,
        "TORCHYARD_MACHINE_FILE": str(tmp_path / "machine.toml"),
        "TORCHYARD_REGISTRY": f"{registry.host}/team",
        "TORCHYARD_REGISTRY_USERNAME": registry.username,
        "TORCHYARD_REGISTRY_PASSWORD": registry.password,
    }


def test_two_runners_share_images_and_layers_through_the_registry(
    *,
    client: docker.DockerClient,
    registry: LoopbackRegistry,
    pushed_base: str,
    runner_env: dict[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:
    entry = _entry(pushed_base)
    lockdir = tmp_path / "lockfiles"
    lock_entry(entry, lockdir, {})
    remove_images(client, f"{image_repository(PROJECT, ENTRY)}:")
    client.api.prune_builds(all=True)  # runner A starts cold, whatever this machine built before
    try:
        # Runner A: the base comes from the registry by digest (no per-machine override), then a push.
        (first,) = build_images(
            [entry], lockdir, BuildOptions(push=True), project=PROJECT, machine=load_machine(runner_env), env=runner_env
        )
        assert first.origin == "cold" and len(first.pushed) == 2
        image = client.images.get(first.tag)
        assert image.labels["org.opencontainers.image.base.digest"] == pushed_base.partition("@")[2]

        # A fresh runner B: none of this entry's images, no base by that name, no build cache.
        remove_images(client, f"{image_repository(PROJECT, ENTRY)}:", "torchyard-test/base")
        client.api.prune_builds(all=True)
        changed = tmp_path / "changed.py"
        changed.write_text("# a source-only change: a new tag, the same dependency layer\n")
        shipped = inimage_files()
        with monkeypatch.context() as patch:
            patch.setattr("torchyard.image.plan.inimage_files", lambda: (*shipped, ("torchyard/x.py", changed)))
            capfd.readouterr()
            (second,) = build_images(
                [entry], lockdir, BuildOptions(), project=PROJECT, machine=load_machine(runner_env), env=runner_env
            )
            log = capfd.readouterr().err
        assert second.tag != first.tag
        assert second.origin == "cache", "runner B rebuilt the dependency layer instead of using the registry's"
        assert "Downloading" not in log and "Prepared" not in log  # uv fetched no wheel

        # Runner B again, on the unchanged entry: the image is pulled by its content-addressed tag.
        remove_images(client, f"{image_repository(PROJECT, ENTRY)}:")
        (third,) = build_images(
            [entry], lockdir, BuildOptions(), project=PROJECT, machine=load_machine(runner_env), env=runner_env
        )
        assert (third.tag, third.origin) == (first.tag, "pulled")
        assert third.pulled is not None and third.pulled.bytes > 0

        # The password is nowhere: not in any output, label, history entry or layer.
        output = capfd.readouterr()
        assert registry.password not in output.out + output.err
        pulled = client.images.get(third.tag)
        assert registry.password not in repr(pulled.attrs) + repr(pulled.history())
        saved = io.BytesIO()
        for chunk in pulled.save(named=True):
            saved.write(chunk)
        assert registry.password.encode() not in saved.getvalue()
    finally:
        remove_images(client, f"{image_repository(PROJECT, ENTRY)}:", "torchyard-test/base")


def test_a_base_digest_the_registry_lacks_is_one_line(
    registry: LoopbackRegistry, pushed_base: str, runner_env: dict[str, str], tmp_path: Path
) -> None:
    missing = f"{registry.host}/torchyard-test/base@sha256:{'0' * 64}"
    entry = _entry(missing)
    lock_entry(entry, tmp_path, {})
    with pytest.raises(ImageBuildError) as caught:
        build_images(
            [entry], tmp_path, BuildOptions(), project=PROJECT, machine=load_machine(runner_env), env=runner_env
        )
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"entry '{ENTRY}': base image {missing} is not in its registry (")


def test_refresh_reads_a_moved_tag_from_the_registry(
    client: docker.DockerClient, registry: LoopbackRegistry, local_base: str, runner_env: dict[str, str], tmp_path: Path
) -> None:
    repository = f"{registry.host}/torchyard-test/moving"
    digests = []
    for version in ("1", "2"):  # two different images pushed to the same tag, one after the other
        client.images.build(
            fileobj=io.BytesIO(f"FROM {local_base}\nLABEL dev.torchyard.test-version={version}\n".encode()),
            tag=f"{repository}:bookworm",
            rm=True,
        )
        events = list(client.api.push(repository, "bookworm", stream=True, decode=True, auth_config=registry.auth))
        digests.append(next(event["aux"]["Digest"] for event in events if "aux" in event))
    assert digests[0] != digests[1]
    matrix = tmp_path / "matrix.toml"
    matrix.write_text(one_entry_matrix(ENTRY, f"{repository}:bookworm@{digests[0]}", ["six==1.17.0"]))
    try:
        changes = refresh(matrix, load_machine(runner_env), today=dt.date(2026, 11, 30), env=runner_env)
    finally:
        client.images.remove(f"{repository}:bookworm", force=True)
    assert changes == [(f"{repository}:bookworm", digests[0], digests[1])]
    text = matrix.read_text()
    assert f"{repository}:bookworm@{digests[1]}" in text and digests[0] not in text
    assert "exclude-newer = 2026-11-30T00:00:00Z" in text
    print(f"refresh: {repository}:bookworm {digests[0]} -> {digests[1]}")
