"""Markdown tables: one renderer for terminal output, reports and GitHub's step summary.

A stdlib-only leaf module, so both the host side and the in-image side may use it.
"""

from __future__ import annotations

from collections.abc import Sequence


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
