"""The merged tables as Markdown: the compatibility table by symbol, then the operators' counts and the operators
that differ between runs (what a step summary shows)."""

from __future__ import annotations

from torchyard.reports.compare import plain
from torchyard.reports.merge import Cell, CompatibilityTable
from torchyard.reports.ops import OUTCOMES as OPS_OUTCOMES
from torchyard.reports.ops import WORDS as OPS_WORDS
from torchyard.reports.ops import OpsTable

# A run's line (its versions, as the run wrote them) is shown in a code span: a step summary renders no link or
# image a run wrote.
LINE = 400
SYMBOLS = {"passed": "✅", "xfailed": "⚠️ known", "failed": "❌ failed", "error": "❌ error", "skipped": "·", "none": ""}
LEGEND = (
    "✅ passed · ⚠️ known failure (exact) · ❌ failed or error · `·` skipped (blank: not run) · Δ changed against "
    "the run's baseline (its parity.md says what) · in brackets: graph breaks, recompilations, and a delegate's "
    "share where it left part of the program out"
)


def render(table: CompatibilityTable, ops: OpsTable | None = None) -> str:
    """The cases' table (where a run has cases), then the operators' (where a run swept them)."""
    columns = [(run.name, backend) for run in table.runs for backend in run.backends]
    header = ["case", *(f"{plain(run)} {plain(backend)}" for run, backend in columns)]
    lines = [
        "## Compatibility",
        "",
        *(f"- **{plain(run.name)}**: `{plain(run.line, LINE)}`" for run in table.runs),
        "",
    ]
    if table.cases:
        lines += [LEGEND, "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for case in table.cases:
        cells = [_symbol(table.cell(run, case, backend)) for run, backend in columns]
        lines.append("| " + " | ".join([f"`{plain(case)}`", *cells]) + " |")
    return "\n".join(lines) + "\n" + ("\n" + _operators(ops) if ops is not None else "")


def _operators(table: OpsTable) -> str:
    """Counts of operators by outcome per run and backend, then the operators that differ between runs (with
    one run: those that did not pass)."""
    lines = ["## Operators", "", *(f"- **{plain(s.run)}**: `{plain(s.stack_line, LINE)}`" for s in table.sweeps), ""]
    heads = list(OPS_OUTCOMES)
    lines += ["| run | backend | " + " | ".join(heads) + " |", "|---|---|" + "---|" * len(heads)]
    for sweep in table.sweeps:
        for backend in sweep.backends:
            found = table.counts(sweep, backend)
            counts = " | ".join(str(found.get(name, 0)) for name in heads)
            lines.append(f"| {plain(sweep.run)} | {plain(backend)} | {counts} |")
    several = len(table.sweeps) > 1
    listed = [operator for operator in table.operators if (table.differs if several else table.failed)(operator)]
    title = "Operators whose outcome differs between runs" if several else "Operators that did not pass"
    lines += ["", f"### {title}: {len(listed)}", ""]
    if listed:
        header = ["operator", *(f"{plain(run)} {plain(backend)}" for run, backend in table.columns)]
        lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        for operator in listed:
            cells = [OPS_WORDS[table.outcome(run, operator, backend)] for run, backend in table.columns]
            lines.append("| " + " | ".join([f"`{plain(operator)}`", *cells]) + " |")
    return "\n".join(lines) + "\n"


def _symbol(cell: Cell) -> str:
    signals = cell.signals
    return SYMBOLS[cell.outcome] + (" Δ" if cell.changes else "") + (f" ({', '.join(signals)})" if signals else "")
