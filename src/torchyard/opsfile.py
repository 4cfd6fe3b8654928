"""The ops suite's expectations file, as text: its name for a stack, and its contents from a sweep's outcomes.
Shared: the suite writes it from a run (`--collect-expectations`), and `torchyard report --ops-expectations`
from a sweep's shards put back together. Stdlib only."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping

PASSED = "passed"
SET_ASIDE = "set aside"
# The distributions whose versions name a stack's file, where installed (torch always is).
STACK_DISTRIBUTIONS = ("torch", "executorch")

# One outcome: (operator, sample, backend, outcome, detail).
Row = tuple[str, int, str, str, str]


def sample_key(operator: str, sample: int) -> str:
    return f"{operator}#{sample}"


def file_name(identity: Mapping[str, str]) -> str:
    """`cpu-fp32-torch2.14.1-executorch1.5.1.toml`."""
    versions = "-".join(f"{name}{identity[name]}" for name in STACK_DISTRIBUTIONS if name in identity)
    return f"{identity['accelerator']}-{identity['precision']}-{versions}.toml"


def render(stack: Mapping[str, str | int], set_aside: Mapping[str, str], rows: Iterable[Row]) -> str:
    """The file's text: the stack, what was set aside, and every outcome but a pass, sorted."""
    lines = [
        "# Known outcomes of torchyard's ops suite on this stack, written by a run with --collect-expectations.",
        "# Anything not listed here is expected to pass; a run fails on any outcome that differs.",
        "",
        "[stack]",
        *(f"{name} = {json.dumps(value)}" for name, value in stack.items()),
        "",
        "[set-aside]",
        *(f"{json.dumps(key)} = {json.dumps(rule)}" for key, rule in sorted(set_aside.items())),
    ]
    table: dict[str, list[Row]] = {}
    for row in rows:
        if row[3] not in (PASSED, SET_ASIDE):
            table.setdefault(sample_key(row[0], row[1]), []).append(row)
    for key in sorted(table):
        lines += ["", f"[outcomes.{json.dumps(key)}]"]
        for _, _, backend, outcome, detail in sorted(table[key], key=lambda row: row[2]):
            value = f"{{ outcome = {json.dumps(outcome)}, detail = {json.dumps(detail)} }}"
            lines.append(f"{json.dumps(backend)} = {value}")
    return "\n".join(lines) + "\n"
