"""A run fails closed: where a selected suite passed no test, or no test outside the harness passed, the run
fails whatever its tests' own verdicts were. The controller counts each suite's outcomes (xdist forwards
the workers' reports to it) and, at the end, writes the reports and decides."""

from __future__ import annotations

import json
import os
from collections import defaultdict
from typing import Any

import pytest

from torchyard.inimage.plugin.collection import suite_of
from torchyard.inimage.plugin.outcomes import RECORD_KEY
from torchyard.inimage.plugin.startup import LOAD_AT_START, MANIFEST
from torchyard.inimage.report import write_reports
from torchyard.inimage.start import loadavg, proofs
from torchyard.inimage.start.settings import RUN_SETTINGS
from torchyard.names import HARNESS, PROJECT, SUITE_NAMES

NOT_INSTALLED = (
    "not installed in the run's environment: add it to the entry's `requirements` or the project's dependencies, "
    "then `torchyard lock`"
)


class Collector:
    """Gathers every test's result record and each suite's outcomes on the controller (xdist forwards
    workers' reports here)."""

    def __init__(self) -> None:
        self.records: list[dict[str, Any]] = []
        self.passed: dict[str, int] = defaultdict(int)
        self.skip_reasons: dict[str, list[str]] = defaultdict(list)
        self.not_collected: list[str] = []
        self.tests: dict[str, int] = {"with-results": 0, "self-tests": 0, "others": 0}  # as pytest counts them

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        """A file that could not be collected (an import that fails in a project's test file, say): the one
        line that says why, for the run's end and parity.md."""
        if report.failed:
            line = _last_line(report)
            if line.startswith("ModuleNotFoundError: "):
                line += f" ({NOT_INSTALLED})"
            self.not_collected.append(f"{report.nodeid or 'the arguments'}: {line}")

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        suite = suite_of(report)
        self.count(report, suite)
        records = []
        if report.when == "call":  # setup and teardown reports repeat the same user properties
            records = [json.loads(str(value)) for key, value in report.user_properties if key == RECORD_KEY]
            self.records += records
        if report.when == "call" or (report.when == "setup" and not report.passed):  # each test once
            kind = "with-results" if records else "self-tests" if proofs.SELF_TEST in report.keywords else "others"
            self.tests[kind] += 1

    def count(self, report: pytest.TestReport, suite: str | None) -> None:
        """A test of `suite` passed (its call did), or skipped (at setup or in its call), and why."""
        if suite is None:
            return
        if report.skipped and report.when in ("setup", "call"):
            longrepr = report.longrepr
            reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
            self.skip_reasons[suite].append(reason.removeprefix("Skipped: "))
        if report.passed and report.when == "call":
            self.passed[suite] += 1


def _last_line(report: pytest.CollectReport) -> str:
    """The error's own last line (`ModuleNotFoundError: No module named 'x'`), not pytest's listing."""
    lines = [line.strip() for line in str(report.longrepr).splitlines() if line.strip()]
    errors = [line.removeprefix("E   ").strip() for line in lines if line.startswith("E ")]
    return (errors or lines or ["no reason given"])[-1][:300]


def empty_suites(selected: tuple[str, ...], passed: dict[str, int]) -> list[str]:
    """The selected suites in which no test passed (the harness self-tests never count)."""
    return [suite for suite in selected if suite != HARNESS and not passed.get(suite)]


def failures(
    selected: tuple[str, ...],
    passed: dict[str, int],
    skip_reasons: dict[str, list[str]],
    not_collected: list[str] | tuple[str, ...] = (),
) -> list[str]:
    """Why the run fails closed: a file that could not be collected (then nothing ran, and each suite being
    empty only follows from it), each selected suite in which no test passed, or, where none is empty, that
    no test outside the harness passed at all. None when the run's own verdicts stand."""
    if not_collected:
        return [f"could not collect {where}" for where in not_collected]
    found = []
    for suite in empty_suites(selected, passed):
        reasons = sorted(set(skip_reasons.get(suite, []))) or ["no test collected"]
        found.append(f"suite {suite}: no test passed; skip reasons: {'; '.join(reasons)[:600]}")
    if not found and not any(count for suite, count in passed.items() if suite != HARNESS):
        found.append("no test passed (every test skipped, or none ran)")
    return found


COLLECTOR = pytest.StashKey[Collector]()


def conclude_run(session: pytest.Session, exitstatus: int) -> None:
    """The controller's reports, written; then the run failed where it fails closed (`failures`)."""
    config = session.config
    if MANIFEST not in config.stash:  # a worker's (only the controller probes), or a run stopped early
        return
    settings = config.stash[RUN_SETTINGS]
    collector = config.stash[COLLECTOR]
    manifest: dict[str, Any] = config.stash[MANIFEST]
    selected = settings.suites or tuple(suite for suite in SUITE_NAMES if suite in str(config.option.markexpr))
    extra: dict[str, Any] = {
        "precision": settings.precision,
        "tolerances": settings.tolerances.as_dict(),
        "suites": list(selected),
        "not-collected": collector.not_collected,
        "pytest-tests": dict(collector.tests),  # why pytest's count is not the results' (parity.md says)
        "finished": proofs.now(),  # when: a merged report puts runs of different days side by side
    }
    manifest["load"] = loadavg.machine_load(
        config.stash.get(LOAD_AT_START, None),
        loadavg.sample(),
        cpus=os.cpu_count(),
        workers=loadavg.worker_count(getattr(config.option, "numprocesses", None)),
    )
    proof = config.stash.get(proofs.PROOFS, None)
    if proof is not None:
        extra["self-tests"] = proof.summary()
    paths = write_reports(settings.report_dir, collector.records, manifest, extra)
    print(f"\ntorchyard: reports in {paths['markdown'].parent} (parity.json, parity.md, env.json)")
    if any(item.get_closest_marker(PROJECT) for item in session.items):
        selected = (*selected, PROJECT)
    if proof is not None:
        proof.save(proofs.now())
    found = failures(selected, collector.passed, collector.skip_reasons, collector.not_collected)
    for failure in found:
        print(f"torchyard: FAILED: {failure}")
    if found and exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
