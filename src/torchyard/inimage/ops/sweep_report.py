"""The ops suite's reports: ops.json (every outcome, with what a rule set aside) and ops.md (outcomes by
backend, then each operator sample that did not pass, with the error's first line or the metrics)."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from torchyard.contract import OPS_JSON, OPS_MARKDOWN
from torchyard.inimage.ops.outcomes import Outcome, OutcomeName

ORDER: tuple[OutcomeName, ...] = (
    "passed", "wrong value", "failed to export", "failed to lower", "failed to run", "crashed", "not supported",
    "set aside",
)  # fmt: skip


def counts(outcomes: Sequence[Outcome], backends: Sequence[str]) -> dict[str, dict[str, int]]:
    """Per backend, how many samples had each outcome."""
    table = {backend: Counter[str]() for backend in backends}
    for outcome in outcomes:
        table.setdefault(outcome.backend, Counter())[outcome.outcome] += 1
    return {backend: {name: found[name] for name in ORDER if found[name]} for backend, found in table.items()}


def write_ops_reports(
    folder: Path,
    *,
    stack: Mapping[str, Any],
    backends: Sequence[str],
    set_aside: Mapping[str, str],
    outcomes: Sequence[Outcome],
    differences: Sequence[str],
    shard: tuple[int, int] = (1, 1),
) -> tuple[Path, Path]:
    folder.mkdir(parents=True, exist_ok=True)
    data = {
        "stack": dict(stack),
        "shard": list(shard),  # K of N: `torchyard report` puts a stack's shards back together
        "backends": list(backends),
        "counts": counts(outcomes, backends),
        "set_aside": dict(sorted(set_aside.items())),
        "outcomes": [outcome.as_dict() for outcome in outcomes],
        "differences": list(differences),
    }
    (folder / OPS_JSON).write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    (folder / OPS_MARKDOWN).write_text(markdown(data, outcomes), encoding="utf-8")
    return folder / OPS_JSON, folder / OPS_MARKDOWN


def markdown(data: Mapping[str, Any], outcomes: Sequence[Outcome]) -> str:
    stack = ", ".join(f"{name} {value}" for name, value in data["stack"].items())
    operators = len({outcome.operator for outcome in outcomes})
    samples = len({(outcome.operator, outcome.sample) for outcome in outcomes})
    lines = [f"# Ops: {stack}", "", f"{operators} operators swept, {samples} samples; "
             f"{len(data['set_aside'])} operators or samples set aside by rule.", ""]  # fmt: skip
    lines += ["| backend | " + " | ".join(ORDER) + " |", "|---" * (len(ORDER) + 1) + "|"]
    for backend, found in data["counts"].items():
        lines.append(f"| {backend} | " + " | ".join(str(found.get(name, 0)) for name in ORDER) + " |")
    if data["differences"]:
        lines += ["", "## Differences from the expectations", "", *(f"- {line}" for line in data["differences"])]
    lines += ["", "## Not passed", "", "| operator | sample | backend | outcome | detail |", "|---|---|---|---|---|"]
    for outcome in outcomes:
        if outcome.outcome not in ("passed", "set aside"):
            detail = outcome.detail.replace("|", "\\|")
            lines.append(
                f"| {outcome.operator} | {outcome.sample} | {outcome.backend} | {outcome.outcome} | {detail} |"
            )
    lines += ["", "## Set aside", "", *(f"- {key}: {rule}" for key, rule in data["set_aside"].items())]
    return "\n".join(lines) + "\n"
