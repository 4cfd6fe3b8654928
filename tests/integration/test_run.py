"""Running entries on the real engine: a GPU entry on this CPU-only host fails before anything runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from torchyard.cli import main

pytestmark = pytest.mark.integration

REPO = Path(__file__).parents[2]


def test_cuda_entry_on_a_cpu_only_host_names_the_missing_device(capsys: pytest.CaptureFixture[str]) -> None:
    status = main(["test", "--matrix", str(REPO / "matrix.toml"), "cuda"])
    err = capsys.readouterr().err.splitlines()
    assert status == 3
    assert err[-1].startswith("torchyard: entry 'cuda' needs a cuda device: no NVIDIA container runtime or CDI spec")
