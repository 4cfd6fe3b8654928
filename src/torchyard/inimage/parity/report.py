"""Reports: parity JSON with every metric, a Markdown table (case x backend), the environment manifest."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from torchyard import contract
from torchyard.util.markdown import markdown_table

VERDICTS = {"passed": "pass", "failed": "FAIL", "error": "ERROR", "skipped": "skip", "xfailed": "known failure"}


def _worst(record: Mapping[str, Any], key: str, pick: Any) -> str:
    values = [comparison[key] for comparison in record.get("comparisons", [])]
    if not values:
        return "-"
    return f"{pick(values):.9f}" if key == "cosine" else f"{pick(values):.3g}"


def markdown(records: Sequence[Mapping[str, Any]], manifest: Mapping[str, Any]) -> str:
    """The table a person reads: one row per case x backend (per suite where they differ)."""
    rows = []
    for record in records:
        bounds = record.get("bounds") or {}
        tolerance = (
            f"{bounds['max_scaled_error']:.0e} / {bounds['max_rel_l2']:.0e} / {bounds['min_cosine']}" if bounds else "-"
        )
        rows.append(
            (
                record["case"],
                record["backend"],
                record["suite"],
                _worst(record, "scaled_max_error", max),
                _worst(record, "rel_l2_error", max),
                _worst(record, "cosine", min) if record.get("comparisons") else "-",
                tolerance,
                f"{record.get('compile_seconds', 0.0):.2f}",
                f"{record.get('run_seconds', 0.0):.3f}",
                VERDICTS.get(record["outcome"], record["outcome"]),
                record.get("reason", "")[:160],
            )
        )
    headers = (
        "case", "backend", "suite", "scaled max err", "rel L2", "cosine", "tolerance (scaled / L2 / cos)",
        "compile s", "run s", "verdict", "reason",
    )  # fmt: skip
    device = manifest.get("device", "?")
    title = (
        f"### torchyard parity: {manifest.get('accelerator', '?')} on {device}, torch {manifest.get('torch', '?')}\n\n"
    )
    counts = {outcome: sum(1 for r in records if r["outcome"] == outcome) for outcome in VERDICTS}
    summary = ", ".join(f"{count} {VERDICTS[outcome]}" for outcome, count in counts.items() if count)
    return title + markdown_table(headers, rows) + f"\n{summary}\n"


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
        json.dumps({"environment": manifest, **extra, "results": ordered}, indent=2, default=str) + "\n"
    )
    table = markdown(ordered, manifest)
    paths["markdown"].write_text(table)
    paths["env"].write_text(json.dumps(manifest, indent=2, default=str) + "\n")
    return paths
