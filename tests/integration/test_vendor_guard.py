"""The vendor guard on a real engine: a base that ships its own `torch`, an index offering a newer one."""

from __future__ import annotations

import os
from pathlib import Path

import docker
import pytest

from tests.integration.conftest import PROJECT
from torchyard.errors import ImageBuildError
from torchyard.image.plan import BuildOptions, image_repository
from torchyard.lock.resolve import lock_entry
from torchyard.lock.standins import write_wheel
from torchyard.matrix import parse_plan
from torchyard.matrix.machine import Source, load_machine
from torchyard.pipeline import build_images

pytestmark = pytest.mark.integration

VENDOR_BASE = "torchyard-test/vendor-base:latest"
MATRIX = """\
exclude-newer = 2026-11-01T00:00:00Z
[indexes]
pypi = "https://unreachable.invalid/simple"
[accelerators.rocm]
base-image = "vendor/base:1@sha256:{zeros}"
indexes = ["pypi"]
runs-on = ["self-hosted"]
[accelerators.rocm.vendor]
torch = "2.13.0+vendor"
[[entry]]
name = "{name}"
accelerator = "rocm"
python = "3.11"
requirements = {requirements}
"""


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("vendor-wheels")
    # A ROCm build, as the image check reads it (torch/version.py names its HIP version).
    vendor = {"torch/__init__.py": b"__version__ = '2.13.0+vendor'\n", "torch/version.py": b"hip = '7.2.41134'\n"}
    write_wheel(folder, "torch", "2.13.0+vendor", files=vendor)
    write_wheel(folder, "torch", "2.14.0", files={"torch/__init__.py": b"__version__ = '2.14.0'\n"})
    write_wheel(folder, "needs-new-torch", "1.0", requires=["torch>=2.14"])
    write_wheel(folder, "needs-torch", "1.0", requires=["torch"])
    # Planted: same vendor version left in place, but it ships a `torch` package that shadows it.
    write_wheel(folder, "clobber", "1.0", files={"torch/__init__.py": b"__version__ = 'clobbered'\n"})
    return folder


@pytest.fixture(scope="module")
def vendor_base(
    client: docker.DockerClient, local_base: str, wheels: Path, tmp_path_factory: pytest.TempPathFactory
) -> str:
    """The local Debian base with the vendor `torch` installed into the system Python."""
    context = tmp_path_factory.mktemp("vendor-base")
    (context / "torch.whl").write_bytes((wheels / "torch-2.13.0+vendor-py3-none-any.whl").read_bytes())
    (context / "Dockerfile").write_text(
        f"FROM {local_base}\nCOPY torch.whl /tmp/torch.whl\n"
        "RUN python3 -c \"import zipfile; zipfile.ZipFile('/tmp/torch.whl').extractall("
        "'/usr/local/lib/python3.11/dist-packages')\" && rm /tmp/torch.whl\n"
        # ROCm's HIP runtime, where AMD's images keep it (the image check looks for it).
        "RUN mkdir -p /opt/rocm/lib && touch /opt/rocm/lib/libamdhip64.so.7\n"
    )
    client.images.build(path=str(context), tag=VENDOR_BASE, rm=True)
    return VENDOR_BASE


def _entry(name: str, requirements: str):  # type: ignore[no-untyped-def]
    text = MATRIX.format(zeros="0" * 64, name=name, requirements=requirements)
    return parse_plan(text, Path("matrix.toml")).entries[0]


def _python_in(client: docker.DockerClient, image: str, code: str) -> str:
    output = client.containers.run(image, ["-c", code], entrypoint=["/opt/torchyard/venv/bin/python"], remove=True)
    return bytes(output).decode().strip()


def test_unguarded_install_replaces_the_vendor_torch(
    client: docker.DockerClient, vendor_base: str, wheels: Path
) -> None:
    script = (
        "python3 -m venv --system-site-packages /v && /v/bin/python -m torchyard_vendor record --overrides /tmp/o.txt"
        " /tmp/r.json torch && /v/bin/pip install -q --no-index --find-links /w needs-new-torch"
        " && /v/bin/python -m torchyard_vendor verify /tmp/r.json"
    )
    vendor_py = Path(__file__).parents[2] / "src" / "torchyard" / "inimage" / "checks" / "vendor.py"
    with pytest.raises(docker.errors.ContainerError) as caught:
        client.containers.run(
            vendor_base,
            ["/bin/sh", "-c", script],
            volumes={
                str(wheels): {"bind": "/w", "mode": "ro"},
                str(vendor_py): {"bind": "/usr/lib/python3/dist-packages/torchyard_vendor.py", "mode": "ro"},
            },
            remove=True,
        )
    assert b"vendor package torch 2.13.0+vendor was replaced by torch 2.14.0" in (caught.value.stderr or b"")


def _build(entry, tmp_path: Path, wheels: Path, env_extra: dict[str, str]):  # type: ignore[no-untyped-def]
    lockdir = Path("lockfiles")  # inside the build context (the test runs in a copy of the tree)
    lock_entry(entry, lockdir, {"pypi": Source("pypi", "find-links", str(wheels))})
    env = {
        **os.environ,
        "TORCHYARD_BASE_IMAGES": f"rocm={VENDOR_BASE}",
        "TORCHYARD_MIRRORS": f"pypi={wheels}",
        **env_extra,
    }
    return build_images([entry], lockdir, BuildOptions(), project=PROJECT, machine=load_machine(env), env=env)


@pytest.mark.usefixtures("in_tree", "vendor_base")
def test_guarded_install_keeps_the_vendor_bytes(client: docker.DockerClient, wheels: Path, tmp_path: Path) -> None:
    (built,) = _build(_entry("guarded", '["needs-torch"]'), tmp_path, wheels, {})
    try:
        assert _python_in(client, built.tag, "import torch; print(torch.__version__)") == "2.13.0+vendor"
        record = _python_in(client, built.tag, "print(open('/opt/torchyard/vendor.json').read())")
        assert '"version": "2.13.0+vendor"' in record
    finally:
        client.images.remove(built.tag)
        client.images.remove(f"{image_repository(PROJECT, 'guarded')}:latest")


@pytest.mark.usefixtures("in_tree", "vendor_base")
def test_planted_replacement_fails_the_build(
    client: docker.DockerClient, wheels: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(ImageBuildError) as caught:
        _build(_entry("planted", '["needs-torch", "clobber"]'), tmp_path, wheels, {})
    output = capfd.readouterr()
    assert "vendor guard: vendor package torch 2.13.0+vendor: `import torch` now loads" in output.out + output.err
    assert str(caught.value).startswith(
        "entry 'planted': the image build failed: vendor guard: vendor package torch 2.13.0+vendor: `import torch`"
    )
    assert not client.images.list(name=image_repository(PROJECT, "planted"))
