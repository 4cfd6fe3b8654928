"""pytest plugin for the stack suites and the project's own tests: options, the fail-closed probe,
fixtures, exact known failures, per-suite fail-closed, reports.

Settings come from options or from the environment variables the host sets (`torchyard.contract`).
Loaded with `-p torchyard.inimage.plugin`, so the project's tests run under the same probe, precision
pinning and reports as torchyard's suites.
"""

from __future__ import annotations

import gc
import importlib
import json
import logging
import os
import platform
import sys
import tempfile
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import pytest
import torch

from torchyard import contract
from torchyard.inimage import load
from torchyard.inimage.cases import Case, CaseLoadError, base_backend, load_cases
from torchyard.inimage.parity.artifacts import ArtifactCache, entry_cache
from torchyard.inimage.parity.errors import describe_error
from torchyard.inimage.parity.harness import REFERENCE_FAILED, Reference, Result, Status, case_reference, evaluate
from torchyard.inimage.parity.inductor_keys import remember as remember_inductor_keys
from torchyard.inimage.parity.report import write_reports
from torchyard.inimage.parity.tolerances import Tolerances, load_tolerances
from torchyard.inimage.parity.training import (
    STEP_FAILS,
    TrainBackend,
    TrainReference,
    make_train_reference,
    train_runner,
    untrainable,
)
from torchyard.inimage.precision import DTYPES, PrecisionError, check_precision, pin_precision
from torchyard.inimage.probe import ProbeError, probe, torch_device
from torchyard.inimage.verdicts import pass_reason, passes
from torchyard.inimage.workers import pin_worker_device
from torchyard.names import (
    BACKEND_NAMES,
    BACKEND_SUITES,
    HARNESS,
    OPT_IN_SUITES,
    PROJECT,
    SUITE_NAMES,
    TRAIN_BACKENDS,
    Precision,
    SuiteName,
)

RECORD_KEY = "torchyard"
SUITES_DIR = Path(__file__).parent / "suites"


def pytest_addoption(parser: pytest.Parser) -> None:
    """An option for each setting that has one (`contract.SETTINGS`), its default the setting's variable; a
    boolean's is a flag that turns it from its default, as the variable may have already."""
    group = parser.getgroup("torchyard")
    environment = contract.Values(os.environ)
    for setting in contract.SETTINGS:
        if setting.option is None:
            continue
        if setting.encoding == "bool":
            turned = environment.enabled(setting.variable) != _on_by_default(setting)
            group.addoption(setting.option, action="store_true", default=turned, help=setting.means)
        else:
            default, choices = environment.text(setting.variable), list(setting.choices) or None
            group.addoption(setting.option, default=default, choices=choices, help=setting.means)


def _on_by_default(setting: contract.Setting) -> bool:
    """A boolean setting's state where nothing sets it."""
    return contract.Values({}).enabled(setting.variable)


def option_values(config: pytest.Config) -> contract.Values:
    """The settings' values from their options (each defaults to its variable), as their variables carry them."""
    encoded: dict[str, str] = {}
    for setting in contract.SETTINGS:
        if setting.option is not None:
            value = config.getoption(setting.option)
            encoded[setting.variable] = (
                setting.encode(bool(value) != _on_by_default(setting)) if setting.encoding == "bool" else str(value)
            )
    return contract.Values(encoded)


def _is_controller(config: pytest.Config) -> bool:
    return not hasattr(config, "workerinput")


def worker_id(config: pytest.Config) -> str:
    """This process's xdist worker ("gw0", ...), or "main" where it is none."""
    return str(getattr(config, "workerinput", {}).get("workerid", "main"))


@dataclass(frozen=True)
class _Settings:
    accelerator: str
    precision: Precision
    report_dir: Path
    tolerances: Tolerances
    case_modules: tuple[str, ...]
    builtin_cases: bool
    suites: tuple[str, ...]
    compile_backends: tuple[str, ...]
    vendor_record: Path | None
    precision_settings: dict[str, object]

    @classmethod
    def from_config(cls, config: pytest.Config) -> _Settings:
        values = option_values(config)
        try:
            tolerances = load_tolerances(values.text(contract.TOLERANCES))
        except (ValueError, json.JSONDecodeError) as error:
            raise pytest.UsageError(f"torchyard tolerances: {error}") from None
        record = values.text(contract.VENDOR_RECORD)
        modes = values.items(contract.COMPILE_MODES) or ("default",)
        return cls(
            accelerator=values.text(contract.ACCELERATOR),
            precision=cast(Precision, values.text(contract.PRECISION)),
            report_dir=Path(values.text(contract.REPORT_DIR)),
            tolerances=tolerances,
            case_modules=values.items(contract.CASES),
            builtin_cases=values.enabled(contract.BUILTIN_CASES),
            suites=values.items(contract.SUITES),
            compile_backends=tuple("inductor" if mode == "default" else f"inductor:{mode}" for mode in modes),
            vendor_record=Path(record) if record else None,
            precision_settings=pin_precision(),
        )

    @property
    def train_backends(self) -> tuple[str, ...]:
        """Eager and compiled, per optimizer; each compile mode other than the default after a colon."""
        modes = [backend.partition(":")[2] for backend in self.compile_backends]
        return tuple(
            backend if "inductor" not in backend or not mode else f"{backend}:{mode}"
            for backend in TRAIN_BACKENDS
            for mode in (modes if "inductor" in backend else [""])
        )

    @property
    def parity_backends(self) -> tuple[str, ...]:
        """Every backend (each compile mode one), but an opt-in suite's only where the run selected that suite."""
        return tuple(
            backend
            for name in BACKEND_NAMES
            if BACKEND_SUITES[name] not in OPT_IN_SUITES or BACKEND_SUITES[name] in self.suites
            for backend in (self.compile_backends if name == "inductor" else (name,))
        )


_settings_key = pytest.StashKey[_Settings]()
_collector_key = pytest.StashKey["_Collector"]()
_manifest_key = pytest.StashKey[dict[str, Any]]()
_load_key = pytest.StashKey[list[float] | None]()
_cases_key = pytest.StashKey[list[Case]]()
_parity_eager_key = pytest.StashKey[dict[str, str]]()  # case -> its parity eager test, where it is selected
_reporters_key = pytest.StashKey[dict[tuple[str, str], str]]()  # (case, reference failure) -> the test failing it


def pytest_configure(config: pytest.Config) -> None:
    for suite in (*SUITE_NAMES, HARNESS, PROJECT):
        config.addinivalue_line("markers", f"{suite}: the {suite} suite")
    config.stash[_settings_key] = settings = _Settings.from_config(config)
    try:  # once, here: a broken cases module is one line, not a collection error per suite
        config.stash[_cases_key] = load_cases(settings.case_modules, builtin=settings.builtin_cases)
    except CaseLoadError as error:
        pytest.exit(f"torchyard: {error}", returncode=pytest.ExitCode.USAGE_ERROR)
    # Each xdist worker compiles into its own inductor cache: no two processes write one directory.
    worker = worker_id(config)
    pin_worker_device(settings.accelerator, worker)  # before torch touches the device
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(contract.cache_root(os.environ, settings.report_dir) / worker)
    # inductor's FX graph and AOTAutograd caches live there too: a warm volume skips their compiles.
    os.environ.setdefault("TORCHINDUCTOR_FX_GRAPH_CACHE", "1")
    os.environ.setdefault("TORCHINDUCTOR_AUTOGRAD_CACHE", "1")
    if _is_controller(config):
        config.stash[_collector_key] = collector = _Collector()
        config.pluginmanager.register(collector, "torchyard-collector")
        try:
            device = torch_device(settings.accelerator)
            check_precision(settings.precision, device.type, _capability(settings), macos=_macos())
            unlocked = os.environ.get(contract.UNLOCKED)
            config.stash[_manifest_key] = probe(
                settings.accelerator,
                settings.vendor_record,
                settings.precision_settings,
                Path(unlocked) if unlocked is not None else None,
            )
        except (ProbeError, PrecisionError) as error:
            pytest.exit(f"torchyard probe: {error}", returncode=contract.PROBE_FAILED)
        config.stash[_load_key] = load.sample()  # before any test: what others run (`load`)


def artifact_cache(settings: _Settings) -> ArtifactCache:
    """Lowered programs by content, shared by every worker and run of the entry (`off` turns it off)."""
    return entry_cache(os.environ, contract.cache_root(os.environ, settings.report_dir))


def _macos() -> tuple[int, int] | None:
    release = platform.mac_ver()[0]
    parts = [int(part) for part in release.split(".")[:2] if part.isdigit()]
    return (parts[0], parts[1] if len(parts) > 1 else 0) if parts else None


def _capability(settings: _Settings) -> tuple[int, int] | None:
    if settings.accelerator == "cuda" and torch.cuda.is_available():
        return torch.cuda.get_device_capability(0)
    return None


def _param(item: pytest.Item, name: str) -> object:
    """A parametrized test's value for `name` (None where it has none)."""
    callspec = getattr(item, "callspec", None)
    return callspec.params.get(name) if callspec is not None else None


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests outside torchyard's suites are the project's own: they carry the `project` marker (unless they
    already say which suite they belong to). First of the hook's implementations: an xdist worker reads
    the `xdist_group` marks in its own (registered later, so called earlier unless this one goes first),
    and a mark added after it groups nothing."""
    known = (*SUITE_NAMES, HARNESS, PROJECT)
    # Where xdist is not loaded (`-p no:xdist`, or not installed) the mark is unknown: a warning, or an error
    # under --strict-markers.
    grouped = any(str(line).startswith("xdist_group") for line in config.getini("markers"))
    for item in items:
        case = _param(item, "case")
        if grouped and isinstance(case, Case):  # one worker per case: its reference and warm compiler are reused
            item.add_marker(pytest.mark.xdist_group(case.name))
        outside = SUITES_DIR not in Path(str(item.path)).parents
        if outside and not any(item.get_closest_marker(name) for name in known):
            item.add_marker(PROJECT)


class _Freezer:
    """Keeps what lives all run out of the cyclic collector's sight (`gc.freeze`), so that its full
    collections (one every few thousand allocations, and pytest's own at the end) walk only what the tests
    make: on the CPU this saved about 2 s of a 17 s warm run, and 0.6 s more of a 9.5 s one.

    The in-image entry point starts with the collector off (`__main__`): importing torch, pytest and the
    plugins allocates millions of objects and frees almost none, and the collector walked them four times
    over (0.2 s of every run). It is turned on with the first freeze, once the tests are collected (or
    when the test loop starts, in an xdist controller, which collects nothing).

    Frozen: what is alive once the tests are collected (torch's modules, the cases, the items), and again
    after any test that imported libraries (torch.export's machinery, ExecuTorch, dynamo load lazily, from
    inside the first test that needs them). Before each later freeze the young generations are collected,
    so what such a test left behind in reference cycles is freed first; an older cycle it left would be
    kept until the process ends (a few times a run at most). Garbage without cycles is freed as always.
    The first freeze, after start-up, collects nothing: with the collector off since the start, its young
    generation is every object the imports made (700,000 on the CPU), and walking them took 0.29 s of
    every run to free 10,000 left in cycles by the imports (about 2 MB), which are kept instead."""

    NEW_MODULES = 50  # imports that make a test "one that imported libraries"

    def __init__(self) -> None:
        self.modules = 0

    def freeze(self, *, collect: bool = True) -> None:
        if collect:
            gc.collect(1)
        gc.freeze()
        self.modules = len(sys.modules)
        gc.enable()

    def after_test(self) -> None:
        if len(sys.modules) >= self.modules + self.NEW_MODULES:
            self.freeze()


_FREEZER = _Freezer()


# What a backend imports the first time it runs, imported once the tests are collected while the collector
# is still off and then frozen with the rest: inside the first test, the collector walked the growing heap
# four times (0.25 s of a warm run on the CPU, for torch.compile's first use). Imported only where a
# selected test runs that backend, so nothing is imported that the run would not have imported anyway.
FIRST_USE = {"inductor": ("torch._dynamo", "torch._inductor.compile_fx")}


# The parameters that name a test's backend: the plugin's own, and the runtime suite's and self-tests'.
BACKEND_PARAMS = ("compile_backend", "parity_backend", "train_backend", "backend")


def selected_backends(items: list[pytest.Item]) -> set[str]:
    """The backends (`inductor:<mode>` as inductor) the given tests run."""
    found = set()
    for item in items:
        for name in BACKEND_PARAMS:
            backend = _param(item, name)
            if isinstance(backend, str):  # a compiled training step imports what inductor does
                found.add("inductor" if backend.startswith("train-inductor") else base_backend(backend))
    return found


def _first_use(items: list[pytest.Item], cache: Path) -> None:
    """The selected backends' first-use imports; for inductor, its cache keys from the entry's cache
    (`inductor_keys`: 0.3 s a process otherwise)."""
    backends = selected_backends(items)
    for backend in sorted(backends & FIRST_USE.keys()):
        for module in FIRST_USE[backend]:
            importlib.import_module(module)
    if "inductor" in backends:
        remember_inductor_keys(cache)


@pytest.hookimpl(trylast=True)
def pytest_collection_finish(session: pytest.Session) -> None:
    settings = session.config.stash[_settings_key]
    parity_eager = {}
    for item in session.items:
        case = _param(item, "case")
        if isinstance(case, Case) and item.get_closest_marker("parity") and _param(item, "parity_backend") == "eager":
            parity_eager[case.name] = item.nodeid
    session.config.stash[_parity_eager_key] = parity_eager
    _first_use(session.items, contract.cache_root(os.environ, settings.report_dir))
    _FREEZER.freeze(collect=gc.isenabled())  # off since start-up (`__main__`): see `_Freezer`


@pytest.hookimpl(tryfirst=True)
def pytest_runtestloop(session: pytest.Session) -> None:
    gc.enable()  # already on where the tests were collected here; an xdist controller collects none


@pytest.hookimpl(trylast=True)
def pytest_runtest_logfinish(nodeid: str, location: tuple[str, int | None, str]) -> None:
    _FREEZER.after_test()


TORCH_TRACE = "torch.__trace"  # torch's structured trace (TORCH_TRACE=<dir> writes it), never propagated


def detach_pytest_from_torch_trace() -> None:
    """pytest (9.1) attaches its log handlers to every logger that does not propagate, torch's structured
    trace among them: torch then builds a trace record for every compile event (it builds none while that
    logger has no handler), and pytest shows each as an empty `DEBUG torch.__trace` line. Its handlers are
    detached there once pytest has attached them, for each phase of each test (its own removal is then a
    no-op); torch's own handler stays."""
    trace = logging.getLogger(TORCH_TRACE)
    for handler in [handler for handler in trace.handlers if type(handler).__module__.startswith("_pytest.")]:
        trace.removeHandler(handler)


# Last of the wrappers, so inside pytest's logging plugin's, which attaches its handlers around each phase.
@pytest.hookimpl(wrapper=True, trylast=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    detach_pytest_from_torch_trace()
    return (yield)


@pytest.hookimpl(wrapper=True, trylast=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    detach_pytest_from_torch_trace()
    return (yield)


@pytest.hookimpl(wrapper=True, trylast=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    detach_pytest_from_torch_trace()
    return (yield)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    settings = metafunc.config.stash[_settings_key]
    if "case" in metafunc.fixturenames:
        cases = metafunc.config.stash[_cases_key]
        metafunc.parametrize("case", cases, ids=[case.name for case in cases])
    if "parity_backend" in metafunc.fixturenames:
        metafunc.parametrize("parity_backend", settings.parity_backends)
    if "compile_backend" in metafunc.fixturenames:
        metafunc.parametrize("compile_backend", settings.compile_backends)
    if "train_backend" in metafunc.fixturenames:
        metafunc.parametrize("train_backend", settings.train_backends)


class Evaluations:
    """Each case x backend runs once per process (the compile and parity suites read the same result),
    and each case's reference is made once."""

    def __init__(self, settings: _Settings, workdir: Path) -> None:
        self.settings = settings
        self.device = torch_device(settings.accelerator)
        self.dtype = DTYPES[settings.precision]
        self.workdir = workdir
        self._results: dict[tuple[str, str], Result] = {}
        self.cache = artifact_cache(settings)
        self._references: dict[str, Reference] = {}
        self._train_references: dict[tuple[str, str], TrainReference] = {}
        self._untrainable: dict[str, str | None] = {}  # per case: its module built and run once, not per backend

    def result(self, case: Case, backend: str) -> Result:
        key = (case.name, backend)
        if key not in self._results:
            if case.name not in self._references:
                self._references[case.name] = case_reference(case, device=self.device, dtype=self.dtype)
            self._results[key] = evaluate(
                case,
                backend,
                device=self.device,
                dtype=self.dtype,
                tolerances=self.settings.tolerances,
                workdir=self.workdir / case.name,
                reference=self._references[case.name],
                cache=self.cache,
            )
        return self._results[key]

    def train_result(self, case: Case, backend: str) -> Result:
        """One optimizer step on `backend` against the float64 step (`parity.training`)."""
        key = (case.name, backend)
        if key not in self._results:
            dtype_name = str(self.dtype).removeprefix("torch.")
            if case.name not in self._untrainable:
                try:
                    self._untrainable[case.name] = untrainable(case)
                except Exception as error:  # its forward fails: no reference, as for the inference suites
                    self._untrainable[case.name] = f"{REFERENCE_FAILED}eager on cpu fails: {describe_error(error)}"
            why = self._untrainable[case.name]
            if why is not None:
                status: Status = "error" if why.startswith(REFERENCE_FAILED) else "skipped"
                self._results[key] = Result(case.name, backend, dtype_name, status, why)
                return self._results[key]
            optimizer = TrainBackend.parse(backend).optimizer
            if (case.name, optimizer) not in self._train_references:
                # The loosest gradient bound among this optimizer's backends decides which elements its
                # step holds still (`training.held_below`): one mask for the reference and each backend.
                gradient_bound = max(
                    self.settings.tolerances.bounds(dtype_name, name, case.tolerances).max_scaled_error
                    for name in self.settings.train_backends
                    if TrainBackend.parse(name).optimizer == optimizer
                )
                self._train_references[case.name, optimizer] = make_train_reference(
                    case, optimizer, device=self.device, dtype=self.dtype, gradient_bound=gradient_bound
                )
            made = self._train_references[case.name, optimizer]
            self._results[key] = evaluate(
                case,
                backend,
                device=self.device,
                dtype=self.dtype,
                weights=torch.float32,
                tolerances=self.settings.tolerances,
                workdir=self.workdir / case.name,
                reference=made.reference,
                runner=train_runner(backend, self.dtype, made.frozen),
            )
        return self._results[key]


@pytest.fixture(scope="session")
def evaluations(request: pytest.FixtureRequest) -> Iterator[Evaluations]:
    """The lowered programs are written to a scratch folder, removed when the session ends, never to the
    reports: real models' programs are tens of MB each (ResNet-18's .pte is 44 MB), and a reports folder
    over the machine's limit is emptied. The entry's artifact cache keeps them, by content."""
    settings = request.config.stash[_settings_key]
    with tempfile.TemporaryDirectory(prefix=f"torchyard-programs-{worker_id(request.config)}-") as scratch:
        yield Evaluations(settings, Path(scratch))


def record(request: pytest.FixtureRequest, suite: str, result: Result, outcome: str, reason: str = "") -> None:
    """Attach the result to the test report (JUnit property too) for the controller to collect."""
    data = {**result.as_dict(), "suite": suite, "outcome": outcome, "reason": reason or result.reason}
    data["worker"] = worker_id(request.config)  # which process: the controller merges them all
    request.node.user_properties.append((RECORD_KEY, json.dumps(data, default=str)))


def conclude(request: pytest.FixtureRequest, suite: SuiteName, case: Case, result: Result) -> None:
    """Apply the suite's pass rule (`verdicts.passes`) and the case's known failure to `result`. Record,
    then skip / xfail / fail / pass the test: every skip and known failure keeps its reason, a pass that
    rests on a rule says which, and a failure is one line (no traceback of torchyard's own code).

    A known failure is exact: only the error it names (type and message pattern) is expected; any other
    outcome on that backend fails, and a backend that starts working fails until the entry is removed.
    A case whose reference cannot be made fails once (`reference_reporter`); its other tests skip, saying why.
    """
    passed = passes(suite, result)
    if result.status == "skipped":
        record(request, suite, result, "skipped")
        pytest.skip(result.reason)
    if result.reason.startswith(REFERENCE_FAILED):
        reporter = reference_reporter(request.config, case.name, result.reason, request.node.nodeid)
        if reporter != request.node.nodeid:
            failing = reporter.rpartition("::")[2]
            why = f"no reference: {result.reason.removeprefix(REFERENCE_FAILED)} (failed once, in {failing})"
            record(request, suite, result, "skipped", why)
            pytest.skip(why)
    known = case.known_failure(result.backend)
    why_pass = ""
    if known is not None and known.computes is not None and (suite != "parity" or (passed and result.known_values)):
        # Wrong values are known where values are compared, and where the bounds can tell them from the
        # right ones (bf16's can be wider than the bug); elsewhere the backend just runs.
        if suite == "parity":
            why_pass = f"passes: these bounds cannot tell the reference from {known.expectation()} ({known.reason})"
        known = None
    if known is not None:
        if passed:
            record(request, suite, result, "failed", f"known failure no longer fails; remove it: {known.reason}")
            pytest.fail(
                f"{case.name} on {result.backend} now works: remove its known failure ({known.reason})", pytrace=False
            )
        if (result.status == "error" and known.matches(result.error_types, result.error_message)) or (
            result.status == "failed" and known.computes is not None and result.known_values
        ):
            record(request, suite, result, "xfailed", f"{known.reason} [observed: {result.reason}]")
            pytest.xfail(known.reason)
        mismatch = known.mismatch(result.error_types, result.error_message) if result.status == "error" else ""
        got = f"expected {known.expectation()}, got {result.status}: {result.reason}"
        got += f" ({mismatch})" if mismatch else ""
        record(request, suite, result, "failed", got)
        pytest.fail(f"{case.name} on {result.backend} ({suite}): {got}", pytrace=False)
    record(
        request,
        suite,
        result,
        "passed" if passed else "failed",
        why_pass or pass_reason(suite, result) if passed else "",
    )
    if not passed:
        pytest.fail(f"{case.name} on {result.backend} ({suite}): {result.status}: {result.reason}", pytrace=False)


def reference_reporter(config: pytest.Config, case: str, reason: str, nodeid: str) -> str:
    """The one test that fails for a case's reference that cannot be made (`reason`): the parity suite's eager
    test where it is selected and the model's forward is what fails (every suite needs it), else the first
    test of this process that meets the failure (a case's tests all run in one process: `xdist_group`)."""
    reporters = config.stash.setdefault(_reporters_key, {})
    if (case, reason) not in reporters:
        designated = config.stash.get(_parity_eager_key, {}).get(case)
        forward = not reason.startswith(REFERENCE_FAILED + STEP_FAILS)
        reporters[case, reason] = designated if designated is not None and forward else nodeid
    return reporters[case, reason]


def _suite_of(report: pytest.TestReport) -> str | None:
    return next((name for name in (*SUITE_NAMES, HARNESS, PROJECT) if name in report.keywords), None)


class _Collector:
    """Gathers every test's result record and each suite's outcomes on the controller (xdist forwards
    workers' reports here)."""

    def __init__(self) -> None:
        self.records: list[dict[str, Any]] = []
        self.passed: dict[str, int] = defaultdict(int)
        self.skip_reasons: dict[str, list[str]] = defaultdict(list)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.count(report, _suite_of(report))
        if report.when == "call":  # setup and teardown reports repeat the same user properties
            self.records += [json.loads(str(value)) for key, value in report.user_properties if key == RECORD_KEY]

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


def empty_suites(selected: tuple[str, ...], passed: dict[str, int]) -> list[str]:
    """The selected suites in which no test passed (the harness self-tests never count)."""
    return [suite for suite in selected if suite != HARNESS and not passed.get(suite)]


def failures(selected: tuple[str, ...], passed: dict[str, int], skip_reasons: dict[str, list[str]]) -> list[str]:
    """Why the run fails closed: each selected suite in which no test passed, or, where none is empty, that no
    test outside the harness passed at all. None when the run's own verdicts stand."""
    found = []
    for suite in empty_suites(selected, passed):
        reasons = sorted(set(skip_reasons.get(suite, []))) or ["no test collected"]
        found.append(f"suite {suite}: no test passed; skip reasons: {'; '.join(reasons)[:600]}")
    if not found and not any(count for suite, count in passed.items() if suite != HARNESS):
        found.append("no test passed (every test skipped, or none ran)")
    return found


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    _conclude_run(session, exitstatus)
    # Every report is written: what is alive now only waits for the process to end. pytest's own last
    # step collects garbage five times over (for exceptions raised in finalizers); frozen, that walks
    # nothing (0.3 s of a 10 s warm run on the CPU, after ExecuTorch's imports grew the heap).
    gc.freeze()


def _conclude_run(session: pytest.Session, exitstatus: int) -> None:
    config = session.config
    if _manifest_key not in config.stash:  # a worker's (only the controller probes), or a run stopped early
        return
    settings = config.stash[_settings_key]
    collector = config.stash[_collector_key]
    manifest: dict[str, Any] = config.stash[_manifest_key]
    selected = settings.suites or tuple(suite for suite in SUITE_NAMES if suite in str(config.option.markexpr))
    extra = {"precision": settings.precision, "tolerances": settings.tolerances.as_dict(), "suites": list(selected)}
    manifest["load"] = load.machine_load(
        config.stash.get(_load_key, None),
        load.sample(),
        cpus=os.cpu_count(),
        workers=load.worker_count(getattr(config.option, "numprocesses", None)),
    )
    paths = write_reports(settings.report_dir, collector.records, manifest, extra)
    print(f"\ntorchyard: reports in {paths['markdown'].parent} (parity.json, parity.md, env.json)")
    if any(item.get_closest_marker(PROJECT) for item in session.items):
        selected = (*selected, PROJECT)
    found = failures(selected, collector.passed, collector.skip_reasons)
    for failure in found:
        print(f"torchyard: FAILED: {failure}")
    if found and exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
