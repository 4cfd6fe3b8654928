"""`torchyard plan`: the entries as a table, as matrix.toml and this project's pyproject decide them."""

from __future__ import annotations

from collections.abc import Sequence

from torchyard.matrix.schema import Entry
from torchyard.util.markdown import markdown_table


def _base(entry: Entry) -> str:
    base = entry.accelerator.base_image
    return "native (no image)" if base is None else f"{base.name}@{base.digest[:19]}"


def _project(entry: Entry) -> str:
    if entry.project is None:
        return "-"
    return entry.project.name if entry.project.kind == "package" else f"{entry.project.name} (source folder)"


def plan_table(entries: Sequence[Entry]) -> str:
    rows = [
        (
            entry.name,
            entry.accelerator.name,
            entry.python,
            _base(entry),
            ", ".join(index.name for index in entry.indexes),
            ", ".join(entry.suites),
            ", ".join(entry.accelerator.runs_on),
            _project(entry),
        )
        for entry in entries
    ]
    headers = ("entry", "accelerator", "python", "base image", "indexes", "suites", "runs on", "project")
    return markdown_table(headers, rows)
