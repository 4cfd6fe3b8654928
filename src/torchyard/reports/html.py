"""The merged tables as one static HTML page (sortable by any column, each cell linking the metrics and errors of
its results). Everything shown is escaped: a report's text comes from a run of other people's code."""

from __future__ import annotations

import json
import math
from html import escape
from typing import Any

from torchyard.reports.compare import number
from torchyard.reports.merge import OUTCOMES, CompatibilityTable
from torchyard.reports.ops import LEGEND as OPS_LEGEND
from torchyard.reports.ops import OUTCOMES as OPS_OUTCOMES
from torchyard.reports.ops import WORDS as OPS_WORDS
from torchyard.reports.ops import OpsTable, plain_text

# The page's labels are words (its cells are coloured too): no emoji font is needed to read it.
WORDS = {"passed": "pass", "xfailed": "known", "failed": "fail", "error": "error", "skipped": "skip", "none": ""}
PAGE_LEGEND = (
    "pass; known: an exact known failure; fail or error; skip (blank: not run); Δ: changed against the run's "
    "baseline (hover for what); small print: graph breaks, recompilations, and a delegate's share where it left "
    "part of the program out"
)
OPS_CLASSES = {"wrong value": "failed", "crashed": "error", "passed": "passed", "set aside": "skipped", "none": ""}
METRICS = ("max_abs_error", "scaled_max_error", "rel_l2_error", "cosine")
# A result's measures shown in its detail, with their words (parity.json's keys).
MEASURED = (
    ("compile_seconds", "lowered or compiled in {:.2f} s"),
    ("latency_ms", "median latency {:.3f} ms"),
    ("artifact_bytes", "program {:,} bytes"),
    ("graphs", "graphs: {}"),
    ("graph_breaks", "graph breaks: {}"),
    ("recompiles", "recompilations: {}"),
)


STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; }
table { border-collapse: collapse; font-size: 14px; }
th, td { border: 1px solid #ccc; padding: 4px 8px; text-align: center; }
th.sortable { cursor: pointer; }
td.case { text-align: left; font-family: monospace; }
td.passed { background: #e6f4ea; } td.xfailed { background: #fff4d6; }
td.failed, td.error { background: #fce8e6; } td.skipped { color: #888; }
td.changed { outline: 2px solid #7b61ff; outline-offset: -2px; }
tr.differs td.case { font-weight: bold; }
td a { color: inherit; text-decoration: none; display: block; }
section.detail { border-top: 1px solid #ddd; margin-top: 1em; padding-top: 0.5em; }
section.detail:target { background: #f3f7ff; }
pre { white-space: pre-wrap; }
"""

# Sorts a table's rows by the clicked column: by name, or by outcome (worst first, each table its own ranks),
# a second click reversing. The page loads nothing from anywhere.
SCRIPT = """
const ranks = RANKS;
document.querySelectorAll("th.sortable").forEach((header) => {
  header.addEventListener("click", () => {
    const table = header.closest("table");
    const body = table.tBodies[0];
    const rank = ranks[table.id] ?? {};
    const column = Number(header.dataset.column);
    const descending = header.dataset.order !== "ascending";
    header.dataset.order = descending ? "ascending" : "descending";
    const key = (row) => {
      const cell = row.children[column];
      return column === 0 ? cell.textContent : (rank[cell.dataset.outcome] ?? 99);
    };
    const rows = Array.from(body.rows).sort((a, b) => {
      const [x, y] = [key(a), key(b)];
      const order = x < y ? -1 : x > y ? 1 : 0;
      return descending ? order : -order;
    });
    rows.forEach((row) => body.appendChild(row));
  });
});
""".replace(
    "RANKS",
    json.dumps({
        "compat": {outcome: position for position, outcome in enumerate(OUTCOMES)},
        "ops": {"differs": 0, "same": 1} | {outcome: position for position, outcome in enumerate(OPS_OUTCOMES)},
    }),
)  # fmt: skip


def _where_it_diverges(diverges: dict[str, Any]) -> str:
    """Localization's record of a failing result (`diverges` in parity.json), as parity.md words it: the first
    node out of bounds with its error and its inputs', the compiler step the bisector named, or why neither."""
    node = diverges.get("node")
    took = f"{_number(diverges.get('seconds'))} s"
    if diverges.get("pass"):
        said = f"{escape(str(diverges['pass']))} (torch's compiler bisector, {took})"
    elif not isinstance(node, dict):
        said = f"not found, {escape(str(diverges.get('note', '')))} ({took})"
    else:
        where = f" at {escape(str(node['source']))}" if node.get("source") else ""
        ran = f", run by {escape(str(node['delegate']))}" if node.get("delegate") else ""
        found = node.get("error")
        error: dict[str, Any] = found if isinstance(found, dict) else {}
        inputs = ", ".join(
            f"<code>{escape(str(item.get('node', '')))}</code>"
            for item in node.get("inputs") or []
            if isinstance(item, dict)
        )
        said = (
            f"node <code>{escape(str(node.get('node', '')))}</code> ({escape(str(node.get('operator', '')))})"
            f"{where}{ran}: {escape(str(error.get('problem', '')))} ({took}, {_number(diverges.get('compared'))} "
            f"nodes compared); its inputs, within the bounds: {inputs or 'the program&#x27;s own inputs and weights'}"
        )
    return f'<p class="diverges"><b>Where it diverges</b>: {said}</p>'


def _diverges_brief(results: list[dict[str, Any]]) -> str:
    """The cell's tooltip tail: the node or compiler step a failing result first diverges at."""
    for result in results:
        diverges = result.get("diverges")
        if isinstance(diverges, dict) and diverges.get("pass"):
            return f"; diverges at {diverges['pass']}"
        node = diverges.get("node") if isinstance(diverges, dict) else None
        if isinstance(node, dict):
            return f"; diverges first at node {node.get('node')} ({node.get('operator')})"
    return ""


def _measured(result: dict[str, Any]) -> str:
    """What a result measured besides its errors: lowering or compile time beside its latency, its program's
    size, its graphs and recompilations (each where the run wrote a number)."""
    said = []
    for key, words in MEASURED:
        value = number(result.get(key))  # as the comparison reads it: past a float's range is infinite
        if value and math.isfinite(value):
            said.append(words.format(result[key]))
    return f"<p>{escape('; '.join(said))}</p>" if said else ""


def _number(value: object) -> str:
    return f"{value:.1f}" if isinstance(value, float) else escape(str(value if value is not None else "?"))


def _detail(anchor: str, title: str, results: list[dict[str, Any]]) -> str:
    parts = [f'<section class="detail" id="{anchor}"><h3>{escape(title)}</h3>']
    for result in results:
        parts.append(
            f"<p><b>{escape(str(result.get('outcome', '')))}</b> in the {escape(str(result.get('suite', '')))} "
            f"suite ({escape(str(result.get('dtype', '')))}; reference: {escape(str(result.get('reference', '')))})"
            f"{': ' + escape(str(result['reason'])) if result.get('reason') else ''}</p>"
        )
        parts.append(_measured(result))
        if isinstance(result.get("diverges"), dict):
            parts.append(_where_it_diverges(result["diverges"]))
        comparisons = [item for item in result.get("comparisons") or [] if isinstance(item, dict)]
        if comparisons:
            rows = "".join(
                "<tr>"
                + "".join(
                    f"<td>{escape(str(item.get(name, '')))}</td>"
                    for name in ("output", "shape", "dtype", *METRICS, "problem")
                )
                + "</tr>"
                for item in comparisons
            )
            heads = "".join(f"<th>{name}</th>" for name in ("output", "shape", "dtype", *METRICS, "problem"))
            parts.append(f"<table><thead><tr>{heads}</tr></thead><tbody>{rows}</tbody></table>")
        if result.get("error_message"):
            parts.append(f"<pre>{escape(str(result['error_message']))}</pre>")
    parts.append('<p><a href="#compat">back to the table</a></p></section>')
    return "".join(parts)


def render(table: CompatibilityTable, ops: OpsTable | None = None) -> str:
    """One page: the cases' table (where a run has cases) and their details, then the operators' table."""
    columns = [(run.name, backend) for run in table.runs for backend in run.backends]
    groups = "".join(f'<th colspan="{len(run.backends)}">{escape(run.name)}</th>' for run in table.runs)
    heads = "".join(
        f'<th class="sortable" data-column="{position}">{escape(backend)}</th>'
        for position, (_, backend) in enumerate(columns, start=1)
    )
    rows: list[str] = []
    details: list[str] = []
    for case in table.cases:
        cells = [f'<td class="case">{escape(case)}</td>']
        for run, backend in columns:
            cell = table.cell(run, case, backend)
            if not cell.results:
                cells.append('<td data-outcome="none"></td>')
                continue
            anchor = f"r{len(details)}"
            title = f"{case} on {backend}, {run}"
            details.append(_detail(anchor, title, cell.results))
            signals = cell.signals
            label = WORDS[cell.outcome] + (" Δ" if cell.changes else "")
            label += f"<br><small>{escape(', '.join(signals))}</small>" if signals else ""
            said = [cell.reason + _diverges_brief(cell.results), *signals, *(f"changed: {c}" for c in cell.changes)]
            tip = escape("; ".join(filter(None, said)), quote=True)
            marked = " changed" if cell.changes else ""
            cells.append(
                f'<td class="{cell.outcome}{marked}" data-outcome="{cell.outcome}" title="{tip}">'
                f'<a href="#{anchor}">{label}</a></td>'
            )
        rows.append("<tr>" + "".join(cells) + "</tr>")
    runs = "".join(f"<li><b>{escape(run.name)}</b>: {escape(run.line)}</li>" for run in table.runs)
    cases = (
        f"<p>{PAGE_LEGEND}. Click a column's header to sort by it, a cell for its metrics and errors.</p>"
        f'<table id="compat"><thead><tr><th rowspan="2" class="sortable" data-column="0">case</th>{groups}</tr>'
        f"<tr>{heads}</tr></thead><tbody>{''.join(rows)}</tbody></table>"
        if table.cases
        else ""
    )
    operators = _operators(ops) if ops is not None else ""
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>torchyard compatibility</title>'
        f"<style>{STYLE}</style></head><body><h1>Compatibility</h1><ul>{runs}</ul>"
        f"{cases}{''.join(details)}{operators}<script>{SCRIPT}</script></body></html>\n"
    )


def _tip(items: list[dict[str, Any]]) -> str:
    """A cell's tooltip: each sample that did not pass, with its error's first line or its metrics."""
    said = []
    for item in sorted(items, key=lambda found: found.get("sample", 0)):
        if item.get("outcome") == "passed":
            continue
        metrics = item.get("metrics")
        scaled = metrics.get("scaled_max_error") if isinstance(metrics, dict) else None
        worst = f" (scaled max error {scaled:.3g})" if isinstance(scaled, float) else ""
        sample = f"sample {item['sample']}: " if item.get("sample", -1) >= 0 else ""
        said.append(f"{sample}{item.get('outcome')}{worst}: {plain_text(item.get('detail'))}")
    return "\n".join(said)


def _operators(table: OpsTable) -> str:
    """The op table as a section of the compatibility page: operators that differ between runs first, marked."""
    columns = table.columns
    groups = "".join(f'<th colspan="{len(sweep.backends)}">{escape(sweep.run)}</th>' for sweep in table.sweeps)
    heads = "".join(
        f'<th class="sortable" data-column="{position}">{escape(backend)}</th>'
        for position, (_, backend) in enumerate(columns, start=2)
    )
    ordered = sorted(table.operators, key=lambda operator: (not table.differs(operator), operator))
    rows = []
    for operator in ordered:
        differs = table.differs(operator)
        cells = [
            f'<td class="case">{escape(operator)}</td>',
            f'<td data-outcome="{"differs" if differs else "same"}">{"differs" if differs else ""}</td>',
        ]
        for run, backend in columns:
            outcome = table.outcome(run, operator, backend)
            tip = escape(_tip(table.cells.get((run, operator, backend), [])), quote=True)
            cells.append(
                f'<td class="{OPS_CLASSES.get(outcome, "error")}" data-outcome="{escape(outcome)}" title="{tip}">'
                f"{OPS_WORDS[outcome]}</td>"
            )
        rows.append(f'<tr class="{"differs" if differs else "same"}">' + "".join(cells) + "</tr>")
    runs = "".join(f"<li><b>{escape(sweep.run)}</b>: {escape(sweep.stack_line)}</li>" for sweep in table.sweeps)
    changed = sum(table.differs(operator) for operator in table.operators)
    return (
        f'<h2 id="operators">Operators</h2><ul>{runs}</ul><p>{OPS_LEGEND}. {len(table.operators)} operators; '
        f"{changed} differ between runs on a backend both swept (listed first). Hover a cell for its samples.</p>"
        f'<table id="ops"><thead><tr><th rowspan="2" class="sortable" data-column="0">operator</th>'
        f'<th rowspan="2" class="sortable" data-column="1">between runs</th>{groups}</tr><tr>{heads}</tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table>"
    )
