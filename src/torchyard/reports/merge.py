"""Several runs' `parity.json` as one compatibility table: case by backend, one column group per run.

A run is a reports folder (`reports/<entry>`), a CI artifact unpacked (`reports-<entry>/`), or a
`parity.json` named directly; its name is its folder's, less the artifact's `reports-` prefix (an ops sweep's
parity.json may hold no case: its ops.json beside it is the run's table, `reports/ops.py`). A cell holds
every result of that case on that backend in that run (a backend can be tested by more than one suite), and
shows the worst of their outcomes.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any

from torchyard.contract import OPS_JSON
from torchyard.errors import UsageError
from torchyard.names import BACKEND_FACTS, BACKEND_NAMES, module_name
from torchyard.reports.files import read_json

# A run's `finished`, as the in-image side writes it: anything else in a parity.json (a run of other people's
# code wrote it) is left out.
FINISHED = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\+00:00", re.ASCII)
# Worst first: a cell shows the first of these that any of its results has.
OUTCOMES = ("failed", "error", "xfailed", "passed", "skipped")


# What a run's line names: its accelerator, each backend's first distribution (`names.BACKEND_FACTS`), its device.
FIRST_DISTRIBUTIONS = dict.fromkeys(module_name(facts.distributions[0]) for facts in BACKEND_FACTS.values())
VERSIONS = ("accelerator", *FIRST_DISTRIBUTIONS, "device")


@dataclass(frozen=True)
class Run:
    name: str
    source: Path
    precision: str
    environment: dict[str, Any]
    results: tuple[dict[str, Any], ...]
    finished: str = ""  # when the run wrote its reports (UTC, ISO 8601), where its parity.json says
    changes: tuple[dict[str, Any], ...] = ()  # what changed against its baseline (`reports.compare`), if held to one

    @property
    def line(self) -> str:
        """What every format says of the run: its precision, its stack's versions and when it finished."""
        versions = ", ".join(f"{name} {self.environment[name]}" for name in VERSIONS if self.environment.get(name))
        when = f"; finished {self.finished_utc}" if self.finished else ""
        return f"{self.precision}; {versions}{when}"

    @property
    def finished_utc(self) -> str:
        """When the run finished, as a reader reads it (`2026-12-06 19:32:19 UTC`); "" where it does not say."""
        return self.finished.replace("T", " ").replace("+00:00", " UTC")

    @property
    def backends(self) -> list[str]:
        """The backends this run reports, in torchyard's order (a compile mode after inductor)."""
        found = dict.fromkeys(str(result["backend"]) for result in self.results)

        def order(backend: str) -> tuple[int, str]:
            base = backend.split(":", 1)[0]
            return (BACKEND_NAMES.index(base) if base in BACKEND_NAMES else len(BACKEND_NAMES), backend)

        return sorted(found, key=order)


DELEGATION_COUNTS = ("delegated-nodes", "non-delegated-nodes", "subgraphs")  # parity.json's `delegation`


@dataclass
class Cell:
    results: list[dict[str, Any]] = field(default_factory=list)
    # What changed against the run's baseline, where the run was held to one (parity.json's `changes`): words.
    changes: list[str] = field(default_factory=list)

    @property
    def outcome(self) -> str:
        found = {str(result.get("outcome", "")) for result in self.results}
        return next((outcome for outcome in OUTCOMES if outcome in found), "none")

    @property
    def reason(self) -> str:
        """The reason of the first result with the cell's outcome (why it failed, was skipped or is known)."""
        return next((str(r.get("reason", "")) for r in self.results if r.get("outcome") == self.outcome), "")

    @property
    def signals(self) -> list[str]:
        """What its results measured short of the best possible, in a few words each: graph breaks,
        recompilations, a delegate that left part of the program out (its share, and its subgraphs)."""
        said = []
        for name, noun in (("graph_breaks", "graph break"), ("recompiles", "recompile")):
            count = _first_count(self.results, name)
            if count:
                said.append(f"{count} {noun}{'s' if count > 1 else ''}")
        delegation: dict[str, Any] = next(
            (r["delegation"] for r in self.results if isinstance(r.get("delegation"), dict)), {}
        )
        taken, left, subgraphs = (_count(delegation.get(key)) for key in DELEGATION_COUNTS)
        plural = "s" if subgraphs != 1 else ""
        counted = isinstance(delegation.get("delegated-nodes"), int)  # Torch-TensorRT counts what it left only
        if counted and taken + left and (left or subgraphs > 1):
            said.append(f"{taken / (taken + left):.0%} delegated in {subgraphs} subgraph{plural}")
        elif left or subgraphs > 1:
            said.append(f"{subgraphs} subgraph{plural}, {left} nodes left out")
        return said


def _count(value: object) -> int:
    """A count a run wrote, or 0 where it wrote something else (a bool, a negative, one no float holds exactly)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 < value <= 2**53 else 0


def _first_count(results: Sequence[dict[str, Any]], name: str) -> int:
    return next((_count(r.get(name)) for r in results if _count(r.get(name))), 0)


@dataclass(frozen=True)
class CompatibilityTable:
    runs: tuple[Run, ...]
    cases: tuple[str, ...]
    cells: dict[tuple[str, str, str], Cell]  # (run, case, backend)

    def cell(self, run: str, case: str, backend: str) -> Cell:
        return self.cells.get((run, case, backend), Cell())


def reports_under(paths: Iterable[Path]) -> list[Path]:
    """Each parity.json a path names: the file itself, or every one under a folder (sorted), but for those in a
    hidden folder under it (`.cpu.previous`: the run before a folder's last, `run.handback.previous_of`)."""
    found: list[Path] = []
    for path in paths:
        if path.is_file():
            found.append(path)
        elif path.is_dir():
            found += sorted(
                item
                for item in path.rglob("parity.json")
                if item.is_file()
                and not item.is_symlink()
                and not any(part.startswith(".") for part in item.relative_to(path).parts[:-1])
            )
        else:
            raise UsageError(f"report: {path}: no such file or folder")
    return found


def _run_name(report: Path) -> str:
    folder = report.parent.name or "report"
    return folder.removeprefix("reports-")


def load_run(report: Path) -> Run:
    """One parity.json, checked enough that a broken or foreign file is one line, not a traceback."""
    return run_of(report, read_json(report, "parity.json"))


def run_of(report: Path, data: Any) -> Run:
    """The run a parity.json's data (read from `report`) holds; one line where it holds none."""
    results = data.get("results") if isinstance(data, dict) else None
    if not isinstance(results, list):
        results = None
    valid = results is not None and all(
        isinstance(item, dict) and isinstance(item.get("case"), str) and isinstance(item.get("backend"), str)
        for item in results
    )
    if not valid or results is None or not (results or (report.parent / OPS_JSON).is_file()):
        raise UsageError(f"report: {report}: no results with a case and a backend; not a torchyard parity.json")
    environment = data.get("environment")
    return Run(
        name=_run_name(report),
        source=report,
        precision=str(data.get("precision", "")),
        environment=environment if isinstance(environment, dict) else {},
        results=tuple(results),
        finished=_finished(data.get("finished")),
        changes=_changes(data.get("changes")),
    )


def _changes(value: object) -> tuple[dict[str, Any], ...]:
    """parity.json's `changes` (the host writes them), each with a case, a backend, a kind and its words."""
    found = value.get("changes") if isinstance(value, dict) else None
    fields = ("case", "backend", "kind", "said")
    return tuple(
        {name: str(item[name]) for name in fields}
        for item in (found if isinstance(found, list) else [])
        if isinstance(item, dict) and all(isinstance(item.get(name), str) for name in fields)
    )


def _finished(value: object) -> str:
    """A run's `finished` where it is the harness's UTC timestamp of a real day and time, else ""."""
    if not isinstance(value, str) or not FINISHED.fullmatch(value):
        return ""
    try:
        datetime.fromisoformat(value)
    except ValueError:
        return ""
    return value


def merge(paths: Sequence[Path]) -> CompatibilityTable:
    """The runs the paths name, in the order given, as one table; two runs of one name are numbered."""
    reports = reports_under(paths)
    if not reports:
        raise UsageError(f"report: no parity.json under {', '.join(str(path) for path in paths)}")
    runs: list[Run] = []
    for report in reports:
        run = load_run(report)
        taken = {existing.name for existing in runs}
        if run.name in taken:
            number = 2
            while f"{run.name} ({number})" in taken:
                number += 1
            run = replace(run, name=f"{run.name} ({number})")
        runs.append(run)
    cells: dict[tuple[str, str, str], Cell] = {}
    cases: dict[str, None] = {}
    for run in runs:
        for result in run.results:
            cases[result["case"]] = None
            cells.setdefault((run.name, result["case"], result["backend"]), Cell()).results.append(result)
        for change in run.changes:
            cell = cells.get((run.name, change["case"], change["backend"]))
            if cell is not None:
                cell.changes.append(f"{change['kind']}: {change['said']}")
    return CompatibilityTable(tuple(runs), tuple(sorted(cases)), cells)
