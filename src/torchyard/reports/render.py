"""The report's formats: each is its renderer (a module that renders the merged tables) and its flag
(`torchyard report --<name> FILE`), one row here; `commands/report.py` and the CLI read this table."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from torchyard.reports import html, markdown
from torchyard.reports.merge import CompatibilityTable
from torchyard.reports.ops import OpsTable


@dataclass(frozen=True)
class Format:
    name: str  # its flag: `--<name> FILE`
    means: str  # the flag's help
    render: Callable[[CompatibilityTable, OpsTable | None], str]


FORMATS: tuple[Format, ...] = (
    Format("markdown", "write the Markdown here, not stdout", markdown.render),
    Format("html", "write the table as a static HTML page", html.render),
)
