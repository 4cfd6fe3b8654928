"""A pull request that changes the project but not the lock, on the real engine: its untrusted build stands on
the dependency image a trusted build of the same pins tagged, and installs nothing of the lock; without that
image it installs the lock wheels-only, so a lock that needs an sdist built waits for a trusted run."""

from __future__ import annotations

import base64
import hashlib
import re
import subprocess
import sys
import uuid
import zipfile
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from torchyard.image.plan import image_repository
from torchyard.trust import project_scope
from torchyard.util import proc

from .conftest import one_entry_matrix, remove_images
from .test_layers import DEBIAN

pytestmark = pytest.mark.integration

# antlr4-python3-runtime 4.9.3 is on PyPI as an sdist only (as ExecuTorch's omegaconf pins it).
REQUIREMENTS = ["antlr4-python3-runtime==4.9.3", "six==1.17.0"]
PYPROJECT = """\
[project]
name = "standing"
version = "0.1.0"
[build-system]
requires = ["hatchling"]
build-backend = "hatchling.build"
"""


# The pull request's wheel gains a .pth file at the top of site-packages.
HOOKED = """\
[tool.hatch.build.targets.wheel.force-include]
"hook.pth" = "standing_hook.pth"
"""
PTH_MARKER = "/opt/torchyard/pth-ran-in-a-build-step"


@pytest.fixture
def project(tmp_path: Path, client: docker.DockerClient) -> Iterator[tuple[Path, str]]:
    entry = f"standing-{uuid.uuid4().hex[:8]}"
    root = tmp_path / "project"
    (root / "src" / "standing").mkdir(parents=True)
    (root / "src" / "standing" / "__init__.py").write_text('WORDS = "from the default branch"\n')
    (root / "pyproject.toml").write_text(PYPROJECT)
    # The pinned Debian base, which machine_env maps to the local one.
    matrix = one_entry_matrix(entry, DEBIAN, REQUIREMENTS) + 'project = "."\nsuites = ["export"]\n'
    (root / "matrix.toml").write_text(matrix)
    (tmp_path / "trusted-matrix.toml").write_text(matrix)
    proc.run(["git", "init", "--quiet"], cwd=root)
    yield root, entry
    remove_images(client, f"/{entry}:")


def _torchyard(root: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "torchyard", *args], cwd=root, env=env, capture_output=True, text=True, check=False
    )


def test_an_untrusted_build_of_a_changed_project_installs_nothing_of_the_lock(
    project: tuple[Path, str], machine_env: dict[str, str], client: docker.DockerClient
) -> None:
    root, entry = project
    env = dict(machine_env)
    assert _torchyard(root, env, "lock").returncode == 0
    trusted = _torchyard(root, env, "build", entry)
    assert trusted.returncode == 0, trusted.stderr[-3000:]
    repository = image_repository(project_scope(root / "matrix.toml", env), entry)  # as the CLI names it
    trusted_image = client.images.get(f"{repository}:latest")
    keys = trusted_image.labels["dev.torchyard.layers"]
    dependency_tag = f"torchyard/dependencies:{keys.split()[-1].partition('=')[2]}"
    dependencies = client.images.get(dependency_tag)

    # The pull request: the project's source changes, the lock does not; its wheel also ships a .pth file,
    # which would run in any build step that starts the venv's Python with site (as root, with the network).
    (root / "src" / "standing" / "__init__.py").write_text('WORDS = "from the pull request"\n')
    (root / "hook.pth").write_text(f"import os; open('{PTH_MARKER}', 'w').close()\n")
    (root / "pyproject.toml").write_text(PYPROJECT + HOOKED)
    untrusted_env = {
        **env,
        "TORCHYARD_TRUST": "untrusted",
        "TORCHYARD_TRUSTED_MATRIX": str(root.parent / "trusted-matrix.toml"),
    }
    untrusted = _torchyard(root, untrusted_env, "build", entry)
    assert untrusted.returncode == 0, untrusted.stderr[-3000:]
    assert f"on the trusted dependency image {dependency_tag}" in untrusted.stderr
    output = untrusted.stdout + untrusted.stderr
    assert not re.search(r"install-layer\.sh (torch|pytorch|numeric|rest)\b", output)  # no group installed, or cached
    assert "built on the trusted dependency image" in untrusted.stdout
    image = client.images.get(f"{repository}:untrusted")
    assert image.id != trusted_image.id and image.labels["dev.torchyard.layers"] == keys
    assert set(dependencies.attrs["RootFS"]["Layers"]) <= set(image.attrs["RootFS"]["Layers"])
    python = ["/opt/torchyard/venv/bin/python"]
    words = client.containers.run(
        image, ["-c", "import antlr4, standing; print(standing.WORDS)"], entrypoint=python, remove=True,
        network_mode="none",
    )  # fmt: skip
    assert words.decode().strip() == "from the pull request"
    # the wheel's .pth ran in no build step: no marker in the image (a shell looks, no Python starts)
    looked = client.containers.run(
        image, ["-c", f"test -e {PTH_MARKER} && echo ran || echo never; ls /opt/torchyard/venv/lib/*/site-packages"],
        entrypoint=["/bin/bash"], remove=True, network_mode="none",
    )  # fmt: skip
    assert looked.decode().startswith("never") and "standing_hook.pth" in looked.decode()

    # Without the trusted dependency image, the untrusted build installs the lock itself, wheels only.
    client.images.remove(dependency_tag)
    (root / "src" / "standing" / "__init__.py").write_text('WORDS = "again"\n')
    alone = _torchyard(root, untrusted_env, "build", entry)
    assert alone.returncode != 0
    assert "antlr4-python3-runtime" in alone.stderr and "Traceback" not in alone.stderr


# Route 3 of issue 57: a package of the pull request's lock ships a `.pth` file (in an earlier group), and a later
# group or the project's wheel is installed after it. An installer that starts the venv's Python with site runs
# that `.pth` as root in a build step with the network; the marker says whether any step did.
LOCK_PTH_MARKER = "/opt/torchyard/lock-pth-ran-in-a-build-step"
# And programs it puts in the venv's bin folder (`.data/scripts`), named as what build steps call by name.
SCRIPT_MARKER = "/opt/torchyard/lock-script-ran-in-a-build-step"
PLANTED_PROGRAMS = ("bash", "sed", "grep", "cat", "mkdir", "chmod", "getent", "useradd", "uv")


def _wheel(folder: Path, name: str, version: str, files: dict[str, str]) -> None:
    """A minimal wheel written by hand (no build backend runs on the host for it)."""
    info = f"{name}-{version}.dist-info"
    files = {
        **files,
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: hand\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(text.encode())}")
    record.append(f"{info}/RECORD,,")
    with zipfile.ZipFile(folder / f"{name}-{version}-py3-none-any.whl", "w") as archive:
        for path, text in files.items():
            archive.writestr(path, text)
        archive.writestr(f"{info}/RECORD", "\n".join(record) + "\n")


def _untrusted_build_of_wheels(
    tmp_path: Path, machine_env: dict[str, str], entry: str, wheels: Path, pins: list[str]
) -> tuple[subprocess.CompletedProcess[str], Path, dict[str, str]]:
    """A project whose lock pins `pins` from the folder `wheels` (its only index), locked, then built untrusted
    with that matrix as the trusted one: the build's result, the project's folder and the lock's environment."""
    root = tmp_path / "project"
    root.mkdir()
    matrix = one_entry_matrix(entry, DEBIAN, pins) + 'suites = ["export"]\n'
    (root / "matrix.toml").write_text(matrix)
    (tmp_path / "trusted-matrix.toml").write_text(matrix)
    proc.run(["git", "init", "--quiet"], cwd=root)
    env = {**machine_env, "TORCHYARD_MIRRORS": f"pypi={wheels}"}
    locked = _torchyard(root, env, "lock")
    assert locked.returncode == 0, locked.stderr[-3000:]
    untrusted_env = {
        **env,
        "TORCHYARD_TRUST": "untrusted",
        "TORCHYARD_TRUSTED_MATRIX": str(tmp_path / "trusted-matrix.toml"),
    }
    return _torchyard(root, untrusted_env, "build", entry), root, env


def test_an_untrusted_build_runs_no_pth_of_its_lock_in_a_build_step(
    tmp_path: Path, machine_env: dict[str, str], client: docker.DockerClient
) -> None:
    entry = f"lockpth-{uuid.uuid4().hex[:8]}"
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    hook = f"import os; open({LOCK_PTH_MARKER!r}, 'w').close()\n"
    # mpmath is the numeric group's; `later` is the rest group's, installed in a later layer.
    scripts = {
        f"mpmath-99.0.data/scripts/{name}": f'#!/bin/sh\ntouch {SCRIPT_MARKER}\nexec /bin/{name} "$@"\n'
        for name in PLANTED_PROGRAMS
    }
    _wheel(wheels, "mpmath", "99.0", {"mpmath/__init__.py": "", "mpmath_hook.pth": hook, **scripts})
    _wheel(wheels, "later", "1.0", {"later/__init__.py": "VALUE = 1\n"})
    try:
        pins = ["mpmath==99.0", "later==1.0"]
        built, root, env = _untrusted_build_of_wheels(tmp_path, machine_env, entry, wheels, pins)
        assert built.returncode == 0, built.stderr[-3000:]
        repository = image_repository(project_scope(root / "matrix.toml", env), entry)
        image = client.images.get(f"{repository}:untrusted")
        looked = client.containers.run(
            image,
            ["-c", f"test -e {LOCK_PTH_MARKER} && echo ran || echo never; "
             f"test -e {SCRIPT_MARKER} && echo ran || echo never; "
             "read -r base < /opt/torchyard/base-python; echo \"$base\"; "
             "test -x /opt/torchyard/venv/bin/sed && echo planted"],
            entrypoint=["/bin/bash"], remove=True, network_mode="none",
        )  # fmt: skip
        pth, script, base, planted = looked.decode().split()
        assert (pth, script) == ("never", "never")  # neither the lock's .pth nor its programs ran in a build step
        assert not base.startswith("/opt/torchyard/venv/")  # uv was told the base's interpreter, not the venv's
        assert planted == "planted"  # the programs were installed, where only the final image's PATH finds them
        # Installed and compiled all the same: the hook runs where Python starts in the image, as it should.
        words = client.containers.run(
            image, ["-c", "import later, mpmath; print(later.VALUE)"],
            entrypoint=["/opt/torchyard/venv/bin/python"], remove=True, network_mode="none", user="root",
        )  # fmt: skip
        assert words.decode().strip() == "1"
        compiled = client.containers.run(
            image, ["-c", "ls /opt/torchyard/venv/lib/python3*/site-packages/later/__pycache__"],
            entrypoint=["/bin/bash"], remove=True, network_mode="none",
        )  # fmt: skip
        assert b".pyc" in compiled
    finally:
        remove_images(client, f"/{entry}:")


def test_a_wheel_that_writes_the_venvs_own_files_is_refused_and_runs_nothing(
    tmp_path: Path, machine_env: dict[str, str], client: docker.DockerClient
) -> None:
    """Review of round three: a wheel's `.data/data` lands at the venv's root; a `pyvenv.cfg` and a
    `lib/pythonX.Y/os.py` there made the venv's interpreter, started by the installer to compile bytecode, load
    the wheel's own standard library (its `encodings` ran as root with the network). The install is refused, and
    no step starts the venv's interpreter. (A package's other data, sympy's share/man say, is its own.)"""
    entry = f"venvcfg-{uuid.uuid4().hex[:8]}"
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    payload = f"import os\nopen({LOCK_PTH_MARKER!r}, 'w').close()\n"
    _wheel(
        wheels, "mpmath", "99.0",
        {
            "mpmath/__init__.py": "",
            "mpmath-99.0.data/data/pyvenv.cfg": "home = /opt/torchyard/venv/bin\n",
            "mpmath-99.0.data/data/lib/python3.11/os.py": "# the standard library's landmark\n",
            "mpmath-99.0.data/data/lib/python3.11/encodings/__init__.py": payload,
        },
    )  # fmt: skip
    try:
        built, _, _ = _untrusted_build_of_wheels(tmp_path, machine_env, entry, wheels, ["mpmath==99.0"])
        assert built.returncode != 0
        assert "a package wrote the venv's pyvenv.cfg or its lib/ outside site-packages" in built.stderr
        assert "pyvenv.cfg" in built.stderr and "Traceback" not in built.stderr
    finally:
        remove_images(client, f"/{entry}:")
