"""Markdown for people: one table renderer for terminal output and reports, and GitHub's step summary.

A stdlib-only leaf module: the in-image reports use the table too.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path


def _cell(value: object) -> str:
    return str(value).replace("|", "\\|").replace("\n", " ")


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A GitHub-flavoured Markdown table, columns padded so it also reads well as plain text."""
    cells = [[_cell(h) for h in headers], *[[_cell(v) for v in row] for row in rows]]
    widths = [max(len(row[column]) for row in cells) for column in range(len(headers))]
    lines = [
        "| " + " | ".join(value.ljust(width) for value, width in zip(row, widths, strict=True)) + " |" for row in cells
    ]
    lines.insert(1, "|" + "|".join("-" * (width + 2) for width in widths) + "|")
    return "\n".join(lines) + "\n"


def append_step_summary(markdown: str, env: Mapping[str, str] = os.environ) -> bool:
    """Append to `$GITHUB_STEP_SUMMARY` when a workflow set it; returns whether it did."""
    summary = env.get("GITHUB_STEP_SUMMARY")
    if not summary:
        return False
    with Path(summary).open("a", encoding="utf-8") as handle:
        handle.write(markdown.rstrip("\n") + "\n\n")
    return True
