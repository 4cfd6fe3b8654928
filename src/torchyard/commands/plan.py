"""`torchyard plan`: the entries as a table, as matrix.toml and this project's pyproject decide them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from torchyard.image.plan import resolve_base
from torchyard.matrix.schema import Entry
from torchyard.util.markdown import markdown_table


def _base(entry: Entry, overrides: Mapping[str, str]) -> str:
    """matrix.toml's base, or this machine's override of it (`TORCHYARD_BASE_IMAGES`, machine.toml), which a
    build uses instead."""
    base = entry.accelerator.base_image
    if base is None:
        return "native (no image)"
    pinned = f"{base.name}@{base.digest[:19]}"
    used = resolve_base(entry, overrides)
    return pinned if used == str(base) else f"{used} (this machine's, not {pinned})"


def _project(entry: Entry) -> str:
    if entry.project is None:
        return "-"
    return entry.project.name if entry.project.kind == "package" else f"{entry.project.name} (source folder)"


def plan_table(entries: Sequence[Entry], base_overrides: Mapping[str, str]) -> str:
    rows = [
        (
            entry.name,
            entry.accelerator.name,
            entry.python,
            _base(entry, base_overrides),
            ", ".join(index.name for index in entry.indexes),
            ", ".join(entry.suites),
            ", ".join(entry.accelerator.runs_on),
            _project(entry),
        )
        for entry in entries
    ]
    headers = ("entry", "accelerator", "python", "base image", "indexes", "suites", "runs on", "project")
    return markdown_table(headers, rows)
