"""Integration tests use the real Docker engine and real uv. They fail, never skip, when either is
missing: CI starts dockerd before running them (.ci/run)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from torchyard.commands.build import make_base
from torchyard.host.engine import engine
from torchyard.image.debootstrap import DEFAULT_TAG

REPO = Path(__file__).parents[2]
# What a build reads from the project folder; torchyard's own files come from the installed package.
TREE_ITEMS = ("lockfiles", "matrix.toml")


@pytest.fixture(scope="session")
def client() -> docker.DockerClient:
    return engine()


@pytest.fixture(scope="session")
def local_base(client: docker.DockerClient) -> str:
    """The debootstrapped Debian base (made once per machine; reused when present)."""
    if not client.images.list(name=DEFAULT_TAG):
        make_base(DEFAULT_TAG)
    return DEFAULT_TAG


def copy_tree(target: Path) -> Path:
    """What an image build reads, copied so a test can change it without touching the checkout."""
    for item in TREE_ITEMS:
        source = REPO / item
        if source.is_dir():
            shutil.copytree(source, target / item, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            (target / item).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(source, target / item)
    return target


@pytest.fixture
def in_tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    tree = copy_tree(tmp_path / "tree")
    monkeypatch.chdir(tree)
    yield tree


@pytest.fixture
def machine_env(local_base: str) -> dict[str, str]:
    """This machine's settings: the cpu entry on the local base; local wheel folders when set."""
    return {**os.environ, "TORCHYARD_BASE_IMAGES": f"cpu={local_base}"}
