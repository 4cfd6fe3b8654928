from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.matrix_text import VALID
from torchyard.errors import UsageError
from torchyard.matrix import parse_plan, select_entries

PLAN = parse_plan(VALID, Path("matrix.toml"))


def names(entries: tuple[object, ...]) -> list[str]:
    return [entry.name for entry in entries]  # type: ignore[attr-defined]


def test_no_selection_is_everything_in_file_order() -> None:
    assert names(select_entries(PLAN)) == ["cpu", "cuda"]


def test_select_by_name_and_accelerator() -> None:
    assert names(select_entries(PLAN, ["cuda"])) == ["cuda"]
    assert names(select_entries(PLAN, accelerators=["cpu"])) == ["cpu"]


def test_unknown_entry_suggests_a_name() -> None:
    with pytest.raises(UsageError, match="no entry named 'cdua'; did you mean 'cuda'"):
        select_entries(PLAN, ["cdua"])


def test_unknown_accelerator() -> None:
    with pytest.raises(UsageError, match="unknown accelerator 'tpu'"):
        select_entries(PLAN, accelerators=["tpu"])


def test_selection_matching_nothing_is_an_error() -> None:
    with pytest.raises(UsageError, match="no entry matches cpu, cuda"):
        select_entries(PLAN, ["cpu"], ["cuda"])
