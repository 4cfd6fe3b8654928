from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from tests.unit.matrix_text import VALID
from torchyard.commands.refresh import bump_exclude_newer, refresh
from torchyard.errors import ConfigError, TorchyardError
from torchyard.matrix import load_plan
from torchyard.matrix.machine import Machine

NEW = "sha256:" + "a" * 64


def test_refresh_moves_cut_off_and_digests_keeping_comments(tmp_path: Path) -> None:
    matrix = tmp_path / "matrix.toml"
    matrix.write_text("# a comment people wrote\n" + VALID)
    current = {image.name: image.digest for image in (a.require_base_image() for a in load_plan(matrix).accelerators)}
    resolved = {**current, "debian:bookworm-slim": NEW}
    changes = refresh(matrix, Machine(), today=dt.date(2027, 1, 4), resolve=resolved.__getitem__)
    text = matrix.read_text()
    assert text.startswith("# a comment people wrote\nexclude-newer = 2027-01-04T00:00:00Z\n")
    assert changes[0] == (
        "debian:bookworm-slim",
        "sha256:" + "7802002798b0e351323ed2357ae6dc5a8c4d0a05a57e7f4d8f97136151d3d603",
        NEW,
    )
    plan = load_plan(matrix)
    assert plan.entry("cpu").accelerator.require_base_image().digest == NEW
    assert plan.entry("cuda").exclude_newer == "2026-10-01T00:00:00Z"  # an entry's own cut-off stays


def test_a_bad_digest_never_half_writes(tmp_path: Path) -> None:
    matrix = tmp_path / "matrix.toml"
    matrix.write_text(VALID)
    with pytest.raises(TorchyardError, match="not a sha256 digest"):
        refresh(matrix, Machine(), today=dt.date(2027, 1, 4), resolve=lambda name: "sha256:short")
    assert matrix.read_text() == VALID
    assert [path.name for path in tmp_path.iterdir()] == ["matrix.toml"]


def test_bump_needs_a_top_level_cut_off() -> None:
    with pytest.raises(ConfigError, match="no top-level exclude-newer"):
        bump_exclude_newer("[indexes]\n", dt.date(2027, 1, 1))
