"""`torchyard report`: merge runs' parity.json (and ops.json, where a run swept operators) into one compatibility
table, as Markdown and static HTML."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from torchyard.errors import UsageError
from torchyard.reports.merge import merge
from torchyard.reports.ops import expectations_file, expectations_text, ops_table
from torchyard.reports.render import compatibility_html, compatibility_markdown
from torchyard.util.atomic import write_atomically
from torchyard.util.markdown import append_step_summary

DEFAULT_FOLDER = Path("reports")


def report(
    paths: Sequence[Path],
    *,
    markdown_file: Path | None = None,
    html_file: Path | None = None,
    ops_expectations: Path | None = None,
    env: Mapping[str, str] = os.environ,
) -> int:
    """The table of `paths` (default: every run under ./reports): Markdown on stdout or into a file (and the
    step summary in GitHub Actions), HTML into a file; each file written whole or not at all. With
    `ops_expectations`, each swept stack's expectations file into that folder, its shards put back together."""
    table = merge(list(paths) or [DEFAULT_FOLDER])
    ops = ops_table([(run.name, run.source) for run in table.runs])
    if ops_expectations is not None:
        if ops is None:
            raise UsageError("report: --ops-expectations: no run among these swept operators (no ops.json)")
        files = {ops_expectations / expectations_file(sweep): expectations_text(sweep) for sweep in ops.sweeps}
        for path, text in files.items():  # every file checked before the first is written
            write_atomically(path, text)
            print(f"torchyard: {path}: the expectations of its stack's sweep", file=sys.stderr)
    text = compatibility_markdown(table, ops)
    if markdown_file is not None:
        write_atomically(markdown_file, text)
        swept = f", {len(ops.operators)} operators" if ops is not None else ""
        print(f"torchyard: {markdown_file}: {len(table.cases)} cases{swept}, {len(table.runs)} runs", file=sys.stderr)
    else:
        sys.stdout.write(text)
    if html_file is not None:
        write_atomically(html_file, compatibility_html(table, ops))
        print(f"torchyard: {html_file}: the same table as a page", file=sys.stderr)
    append_step_summary(text, env)
    return 0
