"""Lock the real `cpu` entry against PyPI: the committed lock must be reproduced byte for byte."""

from __future__ import annotations

from pathlib import Path

import pytest

from torchyard.lock.check import lock_freshness
from torchyard.lock.resolve import lock_entry, uv_version
from torchyard.matrix import load_plan

REPO = Path(__file__).parents[2]

pytestmark = pytest.mark.integration


def test_cpu_lock_from_pypi_reproduces_the_committed_lock(tmp_path: Path) -> None:
    entry = load_plan(REPO / "matrix.toml").entry("cpu")
    path = lock_entry(entry, tmp_path, {})
    assert path.read_bytes() == (REPO / "lockfiles" / "cpu.txt").read_bytes()
    assert lock_freshness(entry, tmp_path, uv_version()).status == "fresh"
