"""pytest plugin for the stack suites: options, the fail-closed probe, fixtures, reports.

Settings come from options or, inside images, from environment variables the runner sets:
TORCHYARD_ACCELERATOR, TORCHYARD_PRECISION, TORCHYARD_REPORT_DIR, TORCHYARD_TOLERANCES (JSON),
TORCHYARD_CASES (comma-separated modules), TORCHYARD_VENDOR_RECORD.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch

from torchyard.inimage.cases import Case, CaseLoadError, load_cases
from torchyard.inimage.parity.harness import Result, evaluate, reference_outputs
from torchyard.inimage.parity.report import write_reports
from torchyard.inimage.parity.tolerances import Tolerances, load_tolerances
from torchyard.inimage.precision import DTYPES, Precision, PrecisionError, check_precision, pin_precision
from torchyard.inimage.probe import ProbeError, probe, torch_device

SUITES = ("export", "compile", "runtime", "parity")
RECORD_KEY = "torchyard"
PROBE_FAILED = 3


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("torchyard")
    env = os.environ.get
    group.addoption("--torchyard-accelerator", default=env("TORCHYARD_ACCELERATOR", "cpu"))
    group.addoption("--torchyard-precision", default=env("TORCHYARD_PRECISION", "fp32"), choices=list(DTYPES))
    group.addoption("--torchyard-report-dir", type=Path, default=Path(env("TORCHYARD_REPORT_DIR", "reports/local")))
    group.addoption("--torchyard-tolerances", default=env("TORCHYARD_TOLERANCES", ""), help="JSON overrides")
    group.addoption("--torchyard-cases", default=env("TORCHYARD_CASES", ""), help="comma-separated case modules")
    group.addoption("--torchyard-vendor-record", default=env("TORCHYARD_VENDOR_RECORD", ""))


def _is_controller(config: pytest.Config) -> bool:
    return not hasattr(config, "workerinput")


def pytest_configure(config: pytest.Config) -> None:
    for suite in (*SUITES, "harness"):
        config.addinivalue_line("markers", f"{suite}: the {suite} suite")
    config.stash[_settings_key] = settings = _Settings.from_config(config)
    # Each xdist worker compiles into its own inductor cache: no two processes write one directory.
    worker = getattr(config, "workerinput", {}).get("workerid", "main")
    cache_root = Path(os.environ.get("TORCHYARD_INDUCTOR_CACHE", settings.report_dir / ".inductor-cache"))
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(cache_root / worker)
    if _is_controller(config):
        config.stash[_collector_key] = collector = _Collector()
        config.pluginmanager.register(collector, "torchyard-collector")
        try:
            check_precision(settings.precision, torch_device(settings.accelerator).type, _capability(settings))
            config.stash[_manifest_key] = probe(
                settings.accelerator, settings.vendor_record, settings.precision_settings
            )
        except (ProbeError, PrecisionError) as error:
            pytest.exit(f"torchyard probe: {error}", returncode=PROBE_FAILED)


def _capability(settings: _Settings) -> tuple[int, int] | None:
    if settings.accelerator == "cuda" and torch.cuda.is_available():
        return torch.cuda.get_device_capability(0)
    return None


@dataclass(frozen=True)
class _Settings:
    accelerator: str
    precision: Precision
    report_dir: Path
    tolerances: Tolerances
    case_modules: tuple[str, ...]
    vendor_record: Path | None
    precision_settings: dict[str, object]

    @classmethod
    def from_config(cls, config: pytest.Config) -> _Settings:
        option = config.getoption
        try:
            tolerances = load_tolerances(option("--torchyard-tolerances"))
        except (ValueError, json.JSONDecodeError) as error:
            raise pytest.UsageError(f"torchyard tolerances: {error}") from None
        record = option("--torchyard-vendor-record")
        return cls(
            accelerator=option("--torchyard-accelerator"),
            precision=option("--torchyard-precision"),
            report_dir=option("--torchyard-report-dir"),
            tolerances=tolerances,
            case_modules=tuple(name for name in option("--torchyard-cases").split(",") if name),
            vendor_record=Path(record) if record else None,
            precision_settings=pin_precision(),
        )


_settings_key = pytest.StashKey[_Settings]()
_collector_key = pytest.StashKey["_Collector"]()
_manifest_key = pytest.StashKey[dict[str, Any]]()


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "case" in metafunc.fixturenames:
        settings = metafunc.config.stash[_settings_key]
        try:
            cases = load_cases(settings.case_modules)
        except CaseLoadError as error:
            raise pytest.UsageError(str(error)) from None
        metafunc.parametrize("case", cases, ids=[case.name for case in cases])


class Evaluations:
    """Each case x backend runs once per process; the suites read the same result."""

    def __init__(self, settings: _Settings, workdir: Path) -> None:
        self.settings = settings
        self.device = torch_device(settings.accelerator)
        self.dtype = DTYPES[settings.precision]
        self.workdir = workdir
        self._results: dict[tuple[str, str], Result] = {}
        self._references: dict[str, list[list[torch.Tensor]]] = {}

    def result(self, case: Case, backend: str) -> Result:
        key = (case.name, backend)
        if key not in self._results:
            if case.name not in self._references:
                self._references[case.name] = reference_outputs(case, case.input_sets())
            self._results[key] = evaluate(
                case,
                backend,
                device=self.device,
                dtype=self.dtype,
                tolerances=self.settings.tolerances,
                workdir=self.workdir / case.name,
                reference=self._references[case.name],
            )
        return self._results[key]


@pytest.fixture(scope="session")
def evaluations(request: pytest.FixtureRequest) -> Iterator[Evaluations]:
    settings = request.config.stash[_settings_key]
    worker = getattr(request.config, "workerinput", {}).get("workerid", "main")
    yield Evaluations(settings, settings.report_dir / "artifacts" / worker)


def record(request: pytest.FixtureRequest, suite: str, result: Result, outcome: str, reason: str = "") -> None:
    """Attach the result to the test report (JUnit property too) for the controller to collect."""
    data = {**result.as_dict(), "suite": suite, "outcome": outcome, "reason": reason or result.reason}
    request.node.user_properties.append((RECORD_KEY, json.dumps(data, default=str)))


def conclude(request: pytest.FixtureRequest, suite: str, case: Case, result: Result, *, passed: bool) -> None:
    """Record, then skip / xfail / fail / pass the test: every skip and known failure keeps its reason."""
    known = case.known_failures.get(result.backend)
    if result.status == "skipped":
        record(request, suite, result, "skipped")
        pytest.skip(result.reason)
    if known is not None:
        if passed:
            record(request, suite, result, "failed", f"known failure no longer fails; remove it: {known}")
            pytest.fail(f"{case.name} on {result.backend} now works: remove its known failure ({known})")
        record(request, suite, result, "xfailed", f"{known} [observed: {result.reason}]")
        pytest.xfail(known)
    record(request, suite, result, "passed" if passed else "failed")
    if not passed:
        pytest.fail(f"{case.name} on {result.backend} ({suite}): {result.status}: {result.reason}", pytrace=False)


class _Collector:
    """Gathers every test's result record on the controller (xdist forwards workers' reports here)."""

    def __init__(self) -> None:
        self.records: list[dict[str, Any]] = []
        self.passed = 0

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when != "call":  # setup and teardown reports repeat the same user properties
            return
        self.passed += report.passed
        self.records += [json.loads(str(value)) for key, value in report.user_properties if key == RECORD_KEY]


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    config = session.config
    if not _is_controller(config) or _manifest_key not in config.stash:
        return
    settings = config.stash[_settings_key]
    collector = config.stash[_collector_key]
    manifest: dict[str, Any] = config.stash[_manifest_key]
    extra = {"precision": settings.precision, "tolerances": settings.tolerances.as_dict()}
    paths = write_reports(settings.report_dir, collector.records, manifest, extra)
    print(f"\ntorchyard: reports in {paths['markdown'].parent} (parity.json, parity.md, env.json)")
    if collector.passed == 0 and exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
        print("torchyard: FAILED: no test passed (every test skipped, or none ran)")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
