"""`torchyard report`: merge runs' parity.json (and ops.json, where a run swept operators) into one compatibility
table, as Markdown and static HTML."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from torchyard.errors import UsageError
from torchyard.reports import markdown, render
from torchyard.reports.merge import merge
from torchyard.reports.ops import expectations_file, expectations_text, ops_table
from torchyard.util.atomic import write_atomically
from torchyard.util.markdown import append_step_summary

DEFAULT_FOLDER = Path("reports")


def report(
    paths: Sequence[Path],
    *,
    files: Mapping[str, Path | None] | None = None,
    ops_expectations: Path | None = None,
    env: Mapping[str, str] = os.environ,
) -> int:
    """The table of `paths` (default: every run under ./reports) in each format `files` names a file for
    (`render.FORMATS`, by name), each written whole or not at all; the Markdown on stdout where no file takes it,
    and in the step summary in GitHub Actions. With `ops_expectations`, each swept stack's expectations file
    into that folder, its shards put back together."""
    table = merge(list(paths) or [DEFAULT_FOLDER])
    ops = ops_table([(run.name, run.source) for run in table.runs])
    if ops_expectations is not None:
        if ops is None:
            raise UsageError("report: --ops-expectations: no run among these swept operators (no ops.json)")
        expected = {ops_expectations / expectations_file(sweep): expectations_text(sweep) for sweep in ops.sweeps}
        for written, text in expected.items():  # every file checked before the first is written
            write_atomically(written, text)
            print(f"torchyard: {written}: the expectations of its stack's sweep", file=sys.stderr)
    files = files or {}
    summary = markdown.render(table, ops)
    if files.get("markdown") is None:
        sys.stdout.write(summary)
    swept = f", {len(ops.operators)} operators" if ops is not None else ""
    for kind in render.FORMATS:
        path = files.get(kind.name)
        if path is not None:
            write_atomically(path, kind.render(table, ops))
            print(
                f"torchyard: {path}: {len(table.cases)} cases{swept}, {len(table.runs)} runs ({kind.name})",
                file=sys.stderr,
            )
    append_step_summary(summary, env)
    return 0
