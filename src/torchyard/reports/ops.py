"""Several runs' ops sweeps (`ops.json`, beside a run's parity.json) as one table: operator by backend, one
column group per run, and the operators whose outcome on a backend differs between runs (what an upgrade
changed). Everything in an ops.json comes from a run of other people's code: it is checked, then escaped."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torchyard import opsfile
from torchyard.contract import OPS_JSON
from torchyard.errors import UsageError
from torchyard.reports.files import read_json

SHARD_SUFFIX = re.compile(r"-shard-[0-9]+$")
# Worst first: a cell shows the first of these that any of its samples has.
OUTCOMES = (
    "wrong value", "crashed", "failed to run", "failed to lower", "failed to export", "not supported", "passed",
    "set aside",
)  # fmt: skip
WORDS = {
    "wrong value": "wrong", "crashed": "crash", "failed to run": "run", "failed to lower": "lower",
    "failed to export": "export", "not supported": "n/s", "passed": "pass", "set aside": "aside", "none": "",
}  # fmt: skip
LEGEND = (
    "pass; wrong: a wrong value; crash: the backend's runtime aborted; run, lower, export: failed to; n/s: not "
    "supported by that backend; aside: set aside by rule (random, uninitialized); blank: not swept"
)


@dataclass(frozen=True)
class Sweep:
    """One run's ops.json: its stack, its backends, each outcome, what a rule set aside."""

    run: str
    stack: dict[str, str]
    backends: tuple[str, ...]
    outcomes: tuple[dict[str, Any], ...]
    set_aside: dict[str, str]
    shard: tuple[int, int] = (1, 1)  # K of N, as its ops.json says
    shards: tuple[int, ...] = (1,)  # put back together (`whole`): the shards it has, of `of`
    of: int = 1

    @property
    def stack_line(self) -> str:
        return ", ".join(f"{name} {value}" for name, value in self.stack.items())


def plain_text(value: object) -> str:
    return value if isinstance(value, str) else ""


def load_sweep(run: str, path: Path) -> Sweep:
    """One ops.json, checked enough that a broken or foreign file is one line, not a traceback."""
    data = read_json(path, "ops.json")
    outcomes = data.get("outcomes") if isinstance(data, dict) else None
    valid = isinstance(outcomes, list) and all(
        isinstance(item, dict)
        and isinstance(item.get("operator"), str)
        and isinstance(item.get("backend"), str)
        and isinstance(item.get("sample"), int)
        and item.get("outcome") in OUTCOMES
        for item in outcomes
    )
    if not isinstance(data, dict) or not valid or not isinstance(outcomes, list):
        raise UsageError(f"report: {path}: no outcomes with an operator, a sample and a backend; not an ops.json")
    stack, backends, aside, shard = data.get("stack"), data.get("backends"), data.get("set_aside"), data.get("shard")
    return Sweep(
        run=run,
        stack={str(key): str(value) for key, value in stack.items()} if isinstance(stack, dict) else {},
        backends=tuple(str(name) for name in backends) if isinstance(backends, list) else (),
        outcomes=tuple(outcomes),
        set_aside={str(key): plain_text(value) for key, value in aside.items()} if isinstance(aside, dict) else {},
        shard=_shard(shard),
    )


def _shard(value: object) -> tuple[int, int]:
    if isinstance(value, list) and len(value) == 2 and all(isinstance(number, int) for number in value):
        return value[0], value[1]
    return 1, 1


def whole(sweeps: Sequence[Sweep]) -> list[Sweep]:
    """The sweeps with a stack's shards put back together: runs named `<name>-shard-<K>` of one stack, each one
    of N shards, become one run `<name>` (a workflow spreads a sweep over runners and uploads each shard)."""
    joined: dict[tuple[str, str, int], list[Sweep]] = {}
    for sweep in sweeps:
        name = SHARD_SUFFIX.sub("", sweep.run) if sweep.shard[1] > 1 else sweep.run
        joined.setdefault((name, json.dumps(sweep.stack, sort_keys=True), sweep.shard[1]), []).append(sweep)
    return [
        Sweep(
            run=name,
            stack=parts[0].stack,
            backends=tuple(dict.fromkeys(backend for part in parts for backend in part.backends)),
            outcomes=tuple(item for part in parts for item in part.outcomes),
            set_aside={key: rule for part in parts for key, rule in part.set_aside.items()},
            shards=tuple(sorted({part.shard[0] for part in parts})),
            of=count,
        )
        for (name, _, count), parts in joined.items()
    ]


# A stack's file name as `opsfile.file_name` makes it from versions and names; anything else in an ops.json's
# stack (written by the run: "../" in a version) would name a file outside the folder.
FILE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*\.toml")


def expectations_file(sweep: Sweep) -> str:
    """The name of a whole sweep's expectations file, refused in one line where its stack would make it a path."""
    name = opsfile.file_name(sweep.stack) if {"accelerator", "precision"} <= sweep.stack.keys() else ""
    if not FILE_NAME.fullmatch(name):
        raise UsageError(f"report: {sweep.run}: its ops.json's stack names no expectations file: {name[:80]!r}")
    return name


def expectations_text(sweep: Sweep) -> str:
    """A whole sweep's expectations file (`opsfile`), as `--collect-expectations` writes one from an unsharded
    run; a sweep that lacks a shard has no file (its operators' outcomes are unknown), and says which."""
    missing = sorted(set(range(1, sweep.of + 1)) - set(sweep.shards))
    if missing:
        raise UsageError(
            f"report: {sweep.run}: shard{'s' if len(missing) > 1 else ''} {', '.join(map(str, missing))} of "
            f"{sweep.of} missing; an expectations file needs every shard of the sweep"
        )
    rows = [
        (
            str(item["operator"]),
            int(item["sample"]),
            str(item["backend"]),
            str(item["outcome"]),
            plain_text(item.get("detail")),
        )
        for item in sweep.outcomes
    ]
    return opsfile.render(sweep.stack, sweep.set_aside, rows)


@dataclass(frozen=True)
class OpsTable:
    sweeps: tuple[Sweep, ...]
    operators: tuple[str, ...]
    cells: dict[tuple[str, str, str], list[dict[str, Any]]]  # (run, operator, backend) -> its samples' outcomes

    @property
    def columns(self) -> list[tuple[str, str]]:
        return [(sweep.run, backend) for sweep in self.sweeps for backend in sweep.backends]

    def outcome(self, run: str, operator: str, backend: str) -> str:
        found = {str(item["outcome"]) for item in self.cells.get((run, operator, backend), [])}
        return next((outcome for outcome in OUTCOMES if outcome in found), "none")

    def differs(self, operator: str) -> bool:
        """Whether a backend swept by two or more runs has this operator with different outcomes in them."""
        by_backend: dict[str, set[str]] = {}
        for run, backend in self.columns:
            outcome = self.outcome(run, operator, backend)
            if outcome != "none":
                by_backend.setdefault(backend, set()).add(outcome)
        return any(len(outcomes) > 1 for outcomes in by_backend.values())

    def failed(self, operator: str) -> bool:
        """Whether any run has this operator with an outcome other than passed or set aside."""
        outcomes = {self.outcome(run, operator, backend) for run, backend in self.columns}
        return bool(outcomes - {"passed", "set aside", "none"})

    def counts(self, sweep: Sweep, backend: str) -> dict[str, int]:
        """How many operators have each (worst) outcome on `backend` in `sweep`."""
        found: dict[str, int] = {}
        for operator in self.operators:
            outcome = self.outcome(sweep.run, operator, backend)
            if outcome != "none":
                found[outcome] = found.get(outcome, 0) + 1
        return found


def ops_table(runs: Sequence[tuple[str, Path]]) -> OpsTable | None:
    """The sweeps beside the runs' parity.json (`(run name, parity.json)`), or None where no run has one."""
    found = [(name, report.parent / OPS_JSON) for name, report in runs]
    sweeps = whole([load_sweep(name, path) for name, path in found if path.is_file()])
    if not sweeps:
        return None
    cells: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for sweep in sweeps:
        for item in sweep.outcomes:
            cells.setdefault((sweep.run, item["operator"], item["backend"]), []).append(item)
        for key, rule in sweep.set_aside.items():
            if "#" not in key:  # a whole operator set aside: every backend of the run says so
                for backend in sweep.backends:
                    cells[(sweep.run, key, backend)] = [{"outcome": "set aside", "detail": rule, "sample": -1}]
    operators = sorted({operator for _, operator, _ in cells})
    return OpsTable(tuple(sweeps), tuple(operators), cells)
