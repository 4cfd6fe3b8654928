"""`torchyard plan`: the entries as a table, as matrix.toml and this project's pyproject decide them."""

from __future__ import annotations

from collections.abc import Sequence

from torchyard.matrix.schema import Entry
from torchyard.util.markdown import markdown_table


def plan_table(entries: Sequence[Entry]) -> str:
    rows = [
        (
            entry.name,
            entry.accelerator.name,
            entry.python,
            f"{entry.accelerator.base_image.name}@{entry.accelerator.base_image.digest[:19]}",
            ", ".join(index.name for index in entry.indexes),
            ", ".join(entry.suites),
            ", ".join(entry.accelerator.runs_on),
            entry.project.name if entry.project else "-",
        )
        for entry in entries
    ]
    headers = ("entry", "accelerator", "python", "base image", "indexes", "suites", "runs on", "project")
    return markdown_table(headers, rows)
