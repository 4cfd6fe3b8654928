"""Reports: parity JSON with every metric, a Markdown table (case x backend), the environment manifest."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from torchyard import contract
from torchyard.names import TRAIN_TIMED_STEPS
from torchyard.util.markdown import markdown_table

VERDICTS = {"passed": "pass", "failed": "FAIL", "error": "ERROR", "skipped": "skip", "xfailed": "known failure"}


def _worst(record: Mapping[str, Any], key: str, pick: Any) -> str:
    values = [comparison[key] for comparison in record.get("comparisons", [])]
    if not values:
        return "-"
    return f"{pick(values):.9f}" if key == "cosine" else f"{pick(values):.3g}"


def _reference(record: Mapping[str, Any]) -> str:
    kind = str(record.get("reference") or "-")
    return kind.split(" (", 1)[0] + (" (fallback)" if kind.startswith("float32") else "")


def eager_of(backend: str) -> str:
    """What a backend's speedup is over: eager inference, or the eager step with the same optimizer."""
    if backend.startswith("train-"):
        return "train-eager-" + backend.split(":", 1)[0].rsplit("-", 1)[1]
    return "eager"


def speed(records: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, dict[str, float | None]]]:
    """Per case and backend: the median latency (ms, device synchronized; for a train backend, one optimizer
    step's) and the speedup over eager (for a train backend, over the eager step with its optimizer)."""
    latency: dict[str, dict[str, float]] = {}
    for record in records:
        if record.get("latency_ms") is not None and record["outcome"] in ("passed", "failed"):
            latency.setdefault(record["case"], {})[record["backend"]] = float(record["latency_ms"])
    table: dict[str, dict[str, dict[str, float | None]]] = {}
    for case, backends in sorted(latency.items()):
        table[case] = {}
        for backend, value in backends.items():
            eager = backends.get(eager_of(backend))
            table[case][backend] = {"median_ms": value, "speedup": (eager / value) if eager and value else None}
    return table


def speed_markdown(table: Mapping[str, Mapping[str, Mapping[str, float | None]]], *, training: bool = False) -> str:
    """Backends as columns, cases as rows: `median ms (speedup over eager)`; the inference backends, or with
    `training` the train backends (one optimizer step's median, speedup over the eager step)."""
    backends = [
        backend
        for backend in dict.fromkeys(backend for row in table.values() for backend in row)
        if backend.startswith("train-") == training
    ]
    rows = []
    for case, row in table.items():
        if not any(backend in row for backend in backends):
            continue
        cells = []
        for backend in backends:
            value = row.get(backend)
            if value is None:
                cells.append("-")
                continue
            ratio = value["speedup"]
            cells.append(f"{value['median_ms']:.3f} ({ratio:.2f}x)" if ratio else f"{value['median_ms']:.3f}")
        rows.append((case, *cells))
    what = "median step ms, speedup over the eager step" if training else "median ms, speedup over eager"
    return markdown_table((f"case ({what})", *backends), rows)


def markdown(records: Sequence[Mapping[str, Any]], manifest: Mapping[str, Any], suites: Sequence[str] = ()) -> str:
    """The tables a person reads, under a title that names the run's `suites`: one row per case x backend
    (per suite where they differ), then speed."""
    rows = []
    for record in records:
        bounds = record.get("bounds") or {}
        tolerance = (
            f"{bounds['max_scaled_error']:.0e} / {bounds['max_rel_l2']:.0e} / {bounds['min_cosine']}" if bounds else "-"
        )
        latency = record.get("latency_ms")
        rows.append(
            (
                record["case"],
                record["backend"],
                record["suite"],
                _worst(record, "scaled_max_error", max),
                _worst(record, "rel_l2_error", max),
                _worst(record, "cosine", min) if record.get("comparisons") else "-",
                tolerance,
                _reference(record),
                f"{record.get('compile_seconds', 0.0):.2f}",
                f"{latency:.3f}" if latency is not None else "-",
                VERDICTS.get(record["outcome"], record["outcome"]),
                record.get("reason", "")[:160],
            )
        )
    headers = (
        "case", "backend", "suite", "scaled max err", "rel L2", "cosine", "tolerance (scaled / L2 / cos)",
        "reference", "compile s", "median ms", "verdict", "reason",
    )  # fmt: skip
    device = manifest.get("device", "?")
    title = f"### torchyard parity: {manifest.get('accelerator', '?')} on {device}, torch {manifest.get('torch', '?')}"
    title += f", {manifest.get('trust', 'trusted')} run"
    title += f"; suites: {', '.join(suites)}\n\n" if suites else "\n\n"
    counts = {outcome: sum(1 for r in records if r["outcome"] == outcome) for outcome in VERDICTS}
    summary = ", ".join(f"{count} {VERDICTS[outcome]}" for outcome, count in counts.items() if count)
    fallbacks = sorted(
        {f"{r['case']}: {r['reference']}" for r in records if str(r.get("reference", "")).startswith("float32")}
    )
    notes = "".join(f"- reference for {line}\n" for line in fallbacks)
    timed = speed(records)
    text = (
        title
        + markdown_table(headers, rows)
        + f"\n{summary}\n"
        + (f"\n{notes}" if notes else "")
        + "\n#### Speed: median latency after warm-up, device synchronized\n\n"
        + speed_markdown(timed)
    )
    if any(backend.startswith("train-") for row in timed.values() for backend in row):
        text += (
            f"\n#### Training speed: median of {TRAIN_TIMED_STEPS} optimizer steps after the compared one, device "
            "synchronized\n\n" + speed_markdown(timed, training=True)
        )
    return text


def write_reports(
    report_dir: Path, records: Sequence[Mapping[str, Any]], manifest: Mapping[str, Any], extra: Mapping[str, Any]
) -> dict[str, Path]:
    """parity.json, parity.md and env.json in `report_dir` (the host puts parity.md in the step summary)."""
    report_dir.mkdir(parents=True, exist_ok=True)
    ordered = sorted(records, key=lambda r: (r["case"], r["backend"], r["suite"]))
    paths = {
        "json": report_dir / contract.PARITY_JSON,
        "markdown": report_dir / contract.PARITY_MARKDOWN,
        "env": report_dir / contract.ENVIRONMENT_JSON,
    }
    paths["json"].write_text(
        json.dumps(
            {"environment": manifest, **extra, "speed": speed(ordered), "results": ordered}, indent=2, default=str
        )
        + "\n"
    )
    table = markdown(ordered, manifest, extra.get("suites", ()))
    paths["markdown"].write_text(table)
    paths["env"].write_text(json.dumps(manifest, indent=2, default=str) + "\n")
    return paths
