"""A pull request that changes the project but not the lock, on the real engine: its untrusted build stands on
the dependency image a trusted build of the same pins tagged, and installs nothing of the lock; without that
image it installs the lock wheels-only, so a lock that needs an sdist built waits for a trusted run."""

from __future__ import annotations

import subprocess
import sys
import uuid
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
    assert "install-layer.sh" not in untrusted.stdout + untrusted.stderr  # no group was installed, or cached
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
