"""GPU bases without GPUs: stand-in bases built here copy each real base's layout, and each is built
through the real Dockerfile on the real engine, the vendor guard and the image check holding.

- Ubuntu 24.04 (the cuda and xpu bases) and AMD's images ship a user with uid 1000.
- AMD's rocm/pytorch images keep torch in a venv first on PATH (/opt/venv); older ones in a conda env.
- A base that lacks a vendor package it is said to ship must stop the build in one line.
- An XPU image needs Level Zero: Debian's own libze1/libze-dev stand in for the loader and headers, and
  the missing GPU driver library is what the image check names.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import pytest

from tests.integration.conftest import PROJECT
from torchyard.errors import ImageBuildError, LockError
from torchyard.image.outcome import Built
from torchyard.image.plan import BuildOptions, image_repository
from torchyard.lock.resolve import lock_entry
from torchyard.lock.standins import write_wheel
from torchyard.matrix import parse_plan
from torchyard.matrix.machine import Source, load_machine
from torchyard.matrix.schema import Entry
from torchyard.pipeline import build_images

pytestmark = pytest.mark.integration

PREFIX = "torchyard-test/base-"
VENDOR_TORCH = "2.13.0+rocm7.2"
HIP_TORCH = {
    "torch/__init__.py": f"__version__ = {VENDOR_TORCH!r}\n".encode(),
    "torch/version.py": f"__version__ = {VENDOR_TORCH!r}\ncuda: None = None\nhip: str = '7.2.41134'\n".encode(),
}
CONDA = "/opt/conda/envs/py_3.11"
# What AMD's images hold besides torch: the HIP runtime the image check looks for.
ROCM_RUNTIME = "mkdir -p /opt/rocm/lib && touch /opt/rocm/lib/libamdhip64.so.7"
STANDINS = {
    # Ubuntu 24.04's own account, uid 1000 (`useradd --uid 1000` fails there: UID 1000 is not unique).
    "ubuntu": "RUN useradd --uid 1000 --create-home --shell /bin/bash ubuntu\n",
    # rocm/pytorch today: torch in /opt/venv, first on PATH.
    "rocm-venv": (
        "COPY torch.whl /tmp/torch.whl\n"
        'RUN python3.11 -m venv /opt/venv && /opt/venv/bin/python -c "import site, zipfile; '
        "zipfile.ZipFile('/tmp/torch.whl').extractall(site.getsitepackages()[0])\" && rm /tmp/torch.whl"
        f" && {ROCM_RUNTIME} && useradd --uid 1000 --create-home ubuntu\n"
        "ENV PATH=/opt/venv/bin:$PATH\n"
    ),
    # Older rocm/pytorch: a conda env, a Python prefix of its own (its stdlib, headers and site folder).
    "rocm-conda": (
        "COPY torch.whl /tmp/torch.whl\n"
        f"RUN mkdir -p {CONDA}/bin {CONDA}/lib {CONDA}/include && cp /usr/bin/python3.11 {CONDA}/bin/"
        f" && cp -a /usr/lib/python3.11 {CONDA}/lib/ && cp -a /usr/include/python3.11 {CONDA}/include/"
        f' && mkdir -p {CONDA}/lib/python3.11/dist-packages && {CONDA}/bin/python3.11 -c "import site, zipfile; '
        "zipfile.ZipFile('/tmp/torch.whl').extractall(site.getsitepackages()[-1])\" && rm /tmp/torch.whl"
        f" && {ROCM_RUNTIME}\n"
        f"ENV PATH={CONDA}/bin:$PATH\n"
    ),
    # Said to ship torch, and does not: the record fails and must stop the build.
    "no-torch": "",
}
MATRIX = """\
exclude-newer = 2026-11-01T00:00:00Z
[indexes]
pypi = "https://unreachable.invalid/simple"
[accelerators.{accelerator}]
base-image = "stand-in/base:1@sha256:{zeros}"
indexes = ["pypi"]
runs-on = ["self-hosted"]
{extra}
[[entry]]
name = "{name}"
accelerator = "{accelerator}"
python = "3.11"
requirements = {requirements}
"""


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("base-wheels")
    write_wheel(folder, "torch", VENDOR_TORCH, files=HIP_TORCH)
    write_wheel(folder, "torch", "2.14.0", files={"torch/__init__.py": b"__version__ = '2.14.0'\n"})
    xpu = {"torch/__init__.py": b"", "torch/version.py": b"__version__ = '2.14.1+xpu'\nxpu = '20250301'\n"}
    write_wheel(folder, "torch", "2.14.1+xpu", files=xpu)
    cpu = {"torch/__init__.py": b"", "torch/version.py": b"__version__ = '2.13.0+cpu'\ncuda = None\n"}
    write_wheel(folder, "torch", "2.13.0+cpu", files=cpu)
    cuda = {"torch/__init__.py": b"", "torch/version.py": b"__version__ = '2.13.0+cu130'\ncuda = '13.0'\n"}
    write_wheel(folder, "torch", "2.13.0+cu130", files=cuda)
    for build in ("cu130", "cu132", "cpu"):  # PyPI's torchvision is the CUDA build; PyTorch's CPU index has the CPU one
        vision = {
            "torchvision/__init__.py": b"",
            "torchvision/version.py": f"__version__ = '0.28.0+{build}'\n".encode(),
        }
        write_wheel(folder, "torchvision", f"0.28.0+{build}", files=vision)
    write_wheel(folder, "needs-torch", "1.0", requires=["torch"])
    write_wheel(folder, "clobber", "1.0", files={"torch/__init__.py": b"__version__ = 'clobbered'\n"})
    return folder


@pytest.fixture(scope="module")
def toolchain(client: docker.DockerClient, local_base: str, tmp_path_factory: pytest.TempPathFactory) -> str:
    """The local Debian base with g++ and Python's headers, as the GPU bases have them (made once)."""
    context = tmp_path_factory.mktemp("toolchain")
    (context / "Dockerfile").write_text(
        f"FROM {local_base}\nRUN apt-get update && apt-get install -y --no-install-recommends g++ python3.11-dev"
        " && rm -rf /var/lib/apt/lists/*\n"
    )
    tag = f"{PREFIX}toolchain:latest"
    client.images.build(path=str(context), tag=tag, rm=True)
    return tag


@pytest.fixture(scope="module")
def standins(
    client: docker.DockerClient, toolchain: str, wheels: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, str]]:
    tags = {}
    for name, steps in STANDINS.items():
        context = tmp_path_factory.mktemp(f"standin-{name}")
        (context / "torch.whl").write_bytes((wheels / f"torch-{VENDOR_TORCH}-py3-none-any.whl").read_bytes())
        (context / "Dockerfile").write_text(f"FROM {toolchain}\n{steps}")
        tags[name] = f"{PREFIX}{name}:latest"
        client.images.build(path=str(context), tag=tags[name], rm=True)
    yield tags
    for tag in tags.values():
        client.images.remove(tag, force=True)


def _entry(name: str, accelerator: str, requirements: str, extra: str = "") -> Entry:
    text = MATRIX.format(accelerator=accelerator, zeros="0" * 64, name=name, requirements=requirements, extra=extra)
    return parse_plan(text, Path("matrix.toml")).entries[0]


def _rocm(name: str, requirements: str = '["needs-torch"]') -> Entry:
    return _entry(name, "rocm", requirements, f'[accelerators.rocm.vendor]\ntorch = "{VENDOR_TORCH}"')


def _build(entry: Entry, base: str, wheels: Path) -> Built:
    lockdir = Path("lockfiles")  # inside the build context (the test runs in a copy of the tree)
    lock_entry(entry, lockdir, {"pypi": Source("pypi", "find-links", str(wheels))})
    env = {
        **os.environ,
        "TORCHYARD_BASE_IMAGES": f"{entry.accelerator.name}={base}",
        "TORCHYARD_MIRRORS": f"pypi={wheels}",
    }
    (built,) = build_images([entry], lockdir, BuildOptions(), project=PROJECT, machine=load_machine(env), env=env)
    return built


def _run(client: docker.DockerClient, image: str, code: str, **kwargs: Any) -> str:
    output = client.containers.run(
        image, ["-c", code], entrypoint=["/opt/torchyard/venv/bin/python"], remove=True, network_mode="none", **kwargs
    )
    return bytes(output).decode().strip()


def _remove(client: docker.DockerClient, built: Built) -> None:
    client.images.remove(built.tag, force=True)
    client.images.remove(f"{image_repository(PROJECT, built.entry)}:latest", force=True)


@pytest.mark.usefixtures("in_tree")
def test_a_base_with_a_uid_1000_user_keeps_it(
    client: docker.DockerClient, standins: dict[str, str], wheels: Path
) -> None:
    built = _build(_entry("on-ubuntu", "cpu", '["needs-torch"]'), standins["ubuntu"], wheels)
    try:
        assert client.images.get(built.tag).attrs["Config"]["User"] == "1000"
        # The suites run as uid 1000 (the base's `ubuntu`), with the home and cache folders theirs to write.
        script = (
            "import os, pwd; open(os.path.expanduser('~/probe'), 'w').write('x');"
            " open('/cache/inductor/probe', 'w').write('x');"
            " print(os.getuid(), pwd.getpwuid(os.getuid()).pw_name, os.environ['HOME'])"
        )
        assert _run(client, built.tag, script) == "1000 ubuntu /home/torchyard"
    finally:
        _remove(client, built)


@pytest.mark.usefixtures("in_tree")
@pytest.mark.parametrize(("layout", "site"), [("rocm-venv", "/opt/venv/lib/"), ("rocm-conda", f"{CONDA}/lib/")])
def test_the_guard_finds_the_vendor_torch_where_the_base_keeps_it(
    client: docker.DockerClient, standins: dict[str, str], wheels: Path, layout: str, site: str
) -> None:
    built = _build(_rocm(f"vendor-{layout}"), standins[layout], wheels)
    try:
        found = _run(client, built.tag, "import torch, torch.version; print(torch.version.hip, torch.__file__)")
        assert found.startswith(f"7.2.41134 {site}")
        record = _run(client, built.tag, "print(open('/opt/torchyard/vendor.json').read())")
        assert f'"version": "{VENDOR_TORCH}"' in record and f'"location": "{site}' in record
        # The probe's check, as a container start runs it, holds too.
        verify = ["/opt/torchyard/vendor.py", "verify", "--quick", "/opt/torchyard/vendor.json"]
        client.containers.run(built.tag, verify, entrypoint=["/opt/torchyard/venv/bin/python"], remove=True)
    finally:
        _remove(client, built)


@pytest.mark.usefixtures("in_tree")
def test_a_package_that_shadows_the_venv_vendor_torch_fails_the_build(
    client: docker.DockerClient, standins: dict[str, str], wheels: Path
) -> None:
    with pytest.raises(ImageBuildError) as caught:
        _build(_rocm("planted-venv", '["needs-torch", "clobber"]'), standins["rocm-venv"], wheels)
    assert str(caught.value).startswith(
        f"entry 'planted-venv': the image build failed: vendor guard: vendor package torch {VENDOR_TORCH}: "
        "`import torch` now loads /opt/torchyard/venv/"
    )
    assert not client.images.list(name=image_repository(PROJECT, "planted-venv"))


@pytest.mark.usefixtures("in_tree")
def test_a_base_without_its_vendor_torch_stops_the_build_in_one_line(
    client: docker.DockerClient, standins: dict[str, str], wheels: Path
) -> None:
    with pytest.raises(ImageBuildError) as caught:
        _build(_rocm("no-vendor"), standins["no-torch"], wheels)
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(
        "entry 'no-vendor': the image build failed: vendor guard: vendor package 'torch' is not installed for the "
        "base's python3.11 (/usr/bin/python3.11, prefix /usr)"
    )
    assert not client.images.list(name=image_repository(PROJECT, "no-vendor"))


@pytest.mark.usefixtures("in_tree")
def test_a_rocm_image_without_hip_torch_fails_its_image_check(
    client: docker.DockerClient, standins: dict[str, str], wheels: Path
) -> None:
    """The venv base's vendor torch kept, but the entry says torch is a plain PyPI one: no vendor pin."""
    with pytest.raises(ImageBuildError) as caught:
        _build(_entry("rocm-plain", "rocm", '["torch==2.14.0"]'), standins["ubuntu"], wheels)
    assert str(caught.value) == (
        "entry 'rocm-plain': the image build failed: image check: missing torch's ROCm (HIP) build (torch absent "
        "is a CPU-only build): lock torch from the accelerator's index, or keep the base's; missing ROCm's HIP "
        "runtime (libamdhip64.so, in /opt/rocm/lib on AMD's images): build on a ROCm base"
    )


@pytest.mark.usefixtures("in_tree")
def test_a_torchvision_built_for_another_torch_build_is_refused_when_it_is_locked(
    client: docker.DockerClient, standins: dict[str, str], wheels: Path
) -> None:
    """torch's CPU build beside torchvision's CUDA build, as an index list that asks another index for torchvision
    gives: refused in one line when the lock is made (issue 71, item 6: the image check named it only after a
    build of minutes), before any test meets `operator torchvision::nms does not exist`."""
    with pytest.raises(LockError) as caught:
        _build(
            _entry("cpu-mixed", "cpu", '["torch==2.13.0+cpu", "torchvision==0.28.0+cu130"]'), standins["ubuntu"], wheels
        )
    assert str(caught.value) == (
        "entry 'cpu-mixed': torchvision 0.28.0+cu130 is the +cu13 build, and the lock pairs it with torch "
        "2.13.0+cpu: it fails at import; take torchvision from the index torch comes from (its +cpu build)"
    )
    built = _build(
        _entry("cpu-matched", "cpu", '["torch==2.13.0+cpu", "torchvision==0.28.0+cpu"]'), standins["ubuntu"], wheels
    )
    _remove(client, built)


@pytest.mark.usefixtures("in_tree")
def test_an_xpu_image_gets_level_zero_and_names_the_missing_driver(
    client: docker.DockerClient, standins: dict[str, str], wheels: Path
) -> None:
    # Debian bookworm packages Level Zero's loader and headers, not Intel's GPU driver library.
    entry = _entry("xpu-standin", "xpu", '["torch==2.14.1+xpu"]', 'system-packages = ["libze1", "libze-dev"]')
    with pytest.raises(ImageBuildError) as caught:
        _build(entry, standins["ubuntu"], wheels)
    assert str(caught.value) == (
        "entry 'xpu-standin': the image build failed: image check: missing Intel's Level Zero GPU driver "
        "(libze_intel_gpu.so.1; apt: libze-intel-gpu1, formerly intel-level-zero-gpu)"
    )


@pytest.mark.usefixtures("in_tree")
def test_system_packages_the_base_cannot_have_stop_the_build(
    client: docker.DockerClient, standins: dict[str, str], wheels: Path
) -> None:
    alternatives = 'system-packages = ["libze-intel-gpu1|intel-level-zero-gpu"]'
    entry = _entry("xpu-nodriver", "xpu", '["torch==2.14.1+xpu"]', alternatives)
    with pytest.raises(ImageBuildError) as caught:
        _build(entry, standins["ubuntu"], wheels)
    assert str(caught.value) == (
        "entry 'xpu-nodriver': the image build failed: system packages: none of "
        "libze-intel-gpu1|intel-level-zero-gpu is in the base's apt sources"
    )


HOSTILE_BACKEND = """
import json, os, socket, zipfile


def _try(action):
    try:
        action()
    except OSError as error:
        return f"refused: {error.strerror}"
    return "done"


def _connect():
    socket.create_connection(("1.1.1.1", 53), timeout=5).close()


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    findings = {
        "uid": os.getuid(),
        "secret": os.environ.get("TORCHYARD_REGISTRY_PASSWORD"),
        "write /etc": _try(lambda: open("/etc/planted", "w").write("x")),
        "write the source": _try(lambda: open("/src/planted", "w").write("x")),
        "network": _try(_connect),
        "env": sorted(name for name in os.environ if "PASSWORD" in name or "TOKEN" in name),
    }
    name = "hostile-0-py3-none-any.whl"
    with zipfile.ZipFile(os.path.join(wheel_directory, name), "w") as wheel:
        wheel.writestr("hostile_findings.json", json.dumps(findings))
        wheel.writestr("hostile-0.dist-info/METADATA", "Metadata-Version: 2.1\\nName: hostile\\nVersion: 0\\n")
        tags = "Wheel-Version: 1.0\\nGenerator: x\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n"
        wheel.writestr("hostile-0.dist-info/WHEEL", tags)
        wheel.writestr("hostile-0.dist-info/RECORD", "")
    return name
"""


@pytest.mark.usefixtures("in_tree")
def test_a_hostile_build_backend_runs_sealed_and_never_on_the_host(
    client: docker.DockerClient, standins: dict[str, str], wheels: Path, tmp_path: Path
) -> None:
    project = Path("hostile")
    project.mkdir()
    (project / "pyproject.toml").write_text(
        '[build-system]\nrequires = []\nbuild-backend = "hostile_backend"\nbackend-path = ["."]\n'
        '[project]\nname = "hostile"\nversion = "0"\nrequires-python = ">=3.11"\n'
    )
    (project / "hostile_backend.py").write_text(HOSTILE_BACKEND)
    for args in (["init", "--quiet"], ["add", "--all"]):
        subprocess.run(["git", *args], cwd=project, check=True)
    text = MATRIX.format(accelerator="cpu", zeros="0" * 64, name="hostile", requirements='["needs-torch"]', extra="")
    entry = parse_plan(text + 'project = "hostile"\n', Path("matrix.toml")).entries[0]
    secret = "s3cret-registry-password-7f1c"
    os.environ["TORCHYARD_REGISTRY_PASSWORD"] = secret
    try:
        built = _build(entry, standins["ubuntu"], wheels)
    finally:
        del os.environ["TORCHYARD_REGISTRY_PASSWORD"]
    try:
        read = (
            "import glob, json, zipfile; wheel = glob.glob('/opt/torchyard/project/*.whl')[0];"
            " print(zipfile.ZipFile(wheel).read('hostile_findings.json').decode())"
        )
        findings = json.loads(_run(client, built.tag, read))
    finally:
        _remove(client, built)
    assert findings["uid"] != 0 and findings["secret"] is None and findings["env"] == []
    assert findings["write /etc"] == "refused: Read-only file system"
    assert findings["write the source"] == "refused: Read-only file system"
    assert findings["network"].startswith("refused")
    assert not Path("/etc/planted").exists() and not (project / "planted").exists()
