"""pytest plugin for the stack suites and the project's own tests, loaded with `-p torchyard.inimage.plugin`
so the project's tests run under the same probe, precision pinning and reports as torchyard's suites.

Its hooks wire the parts together: the settings (`options`), the probe at start-up (`startup`), the tests'
parameters and marks (`collection`), the evaluations the suites share (`evaluation.evaluations`), each test's
outcome (`outcomes`), the run's fail-closed end and reports (`fail_closed`), and what lives all run imported and
frozen before the first test (`first_use`).
"""

from __future__ import annotations

import gc
import logging
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from torchyard.inimage.cases import Case, CaseLoadError, load_cases
from torchyard.inimage.evaluation.cache import record
from torchyard.inimage.evaluation.cache.results import snapshot_project
from torchyard.inimage.evaluation.evaluations import Evaluations, result_cache
from torchyard.inimage.ops.options import add_options as add_ops_options
from torchyard.inimage.plugin.collection import MARKERS, mark_items, parametrize
from torchyard.inimage.plugin.fail_closed import COLLECTOR, Collector, conclude_run
from torchyard.inimage.plugin.first_use import Freezer, detach_pytest_from_torch_trace, import_first_use
from torchyard.inimage.plugin.outcomes import PARITY_EAGER, parity_eager_tests
from torchyard.inimage.plugin.running import Running
from torchyard.inimage.plugin.selection import check_expressions, select_project_tests
from torchyard.inimage.plugin.startup import probe_run
from torchyard.inimage.start import proofs
from torchyard.inimage.start.settings import RUN_SETTINGS, add_options, run_settings
from torchyard.inimage.start.workers import is_controller, pin_worker_device, worker_id

_cases_key = pytest.StashKey[list[Case]]()
_FREEZER = Freezer()


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config, parser: pytest.Parser, args: list[str]) -> None:
    """The result cache's record of the project's reads starts here: before the project's conftest and cases are
    imported, so a data file or a variable their import reads is recorded too (`cache.record.start`)."""
    record.start()


def pytest_addoption(parser: pytest.Parser) -> None:
    add_options(parser)
    add_ops_options(parser)  # the ops suite's
    proofs.add_option(parser)


def pytest_configure(config: pytest.Config) -> None:
    for suite in MARKERS:
        config.addinivalue_line("markers", f"{suite}: the {suite} suite")
    config.stash[RUN_SETTINGS] = settings = run_settings(config)
    try:  # once, here: a broken cases module is one line, not a collection error per suite
        config.stash[_cases_key] = load_cases(settings.case_modules, builtin=settings.options.builtin_cases)
    except CaseLoadError as error:
        pytest.exit(f"torchyard: {error}", returncode=pytest.ExitCode.USAGE_ERROR)
    check_expressions(settings.options.tests_markers, settings.options.tests_keyword)
    # Each xdist worker compiles into its own inductor cache: no two processes write one directory.
    worker = worker_id(config)
    pin_worker_device(settings.accelerator, worker)  # before torch touches the device
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(settings.cache_root / worker)
    # inductor's FX graph and AOTAutograd caches live there too: a warm volume skips their compiles.
    os.environ.setdefault("TORCHINDUCTOR_FX_GRAPH_CACHE", "1")
    os.environ.setdefault("TORCHINDUCTOR_AUTOGRAD_CACHE", "1")
    proofs.register(config)  # every process: a worker leaves proven self-tests out, the controller keeps the proof
    logging_errors_as_python_has_them()
    if is_controller(config):
        config.stash[COLLECTOR] = collector = Collector()
        config.pluginmanager.register(collector, "torchyard-collector")
        config.pluginmanager.register(Running(settings.report_dir), "torchyard-running")
        probe_run(config, settings)


def logging_errors_as_python_has_them() -> None:
    """A logging call that fails inside a library (torch 2.13's `torch.export.load` logs two `%s` with one
    argument) is printed and the program goes on, as plain Python does (`logging.Handler.handleError`): pytest's
    log capture raises it instead, and a library's logging bug became the model's FAIL."""
    from _pytest.logging import LogCaptureHandler  # fenced by selftests/test_plain_errors.py

    LogCaptureHandler.handleError = logging.Handler.handleError  # type: ignore[method-assign]


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """First of the hook's implementations: an xdist worker reads the `xdist_group` marks in its own
    (registered later, so called earlier unless this one goes first), and a mark added after it groups nothing."""
    mark_items(config, items)
    settings = config.stash[RUN_SETTINGS]
    select_project_tests(config, items, settings.options.tests_markers, settings.options.tests_keyword)
    proofs.mark_self_tests(items)  # in every run: parity.md counts them, a proof leaves them out


@pytest.hookimpl(trylast=True)
def pytest_collection_finish(session: pytest.Session) -> None:
    settings = session.config.stash[RUN_SETTINGS]
    session.config.stash[PARITY_EAGER] = parity_eager_tests(session.items)
    if not settings.rerun and settings.artifacts:  # a run that keeps results
        snapshot_project()  # what the result cache keys the project by: before any test imports more
    import_first_use(session.items, settings.cache_root)
    _FREEZER.freeze(collect=gc.isenabled())  # off since start-up (`__main__`): see `Freezer`


@pytest.hookimpl(tryfirst=True)
def pytest_runtestloop(session: pytest.Session) -> None:
    gc.enable()  # already on where the tests were collected here; an xdist controller collects none


@pytest.hookimpl(trylast=True)
def pytest_runtest_logfinish(nodeid: str, location: tuple[str, int | None, str]) -> None:
    _FREEZER.after_test()


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
    parametrize(metafunc, metafunc.config.stash[RUN_SETTINGS], metafunc.config.stash[_cases_key])


@pytest.fixture(scope="session")
def evaluations(request: pytest.FixtureRequest) -> Iterator[Evaluations]:
    """The lowered programs are written to a scratch folder, removed when the session ends, never to the
    reports: real models' programs are tens of MB each (ResNet-18's .pte is 44 MB), and a reports folder
    over the machine's limit is emptied. The entry's artifact cache keeps them, by content."""
    settings = request.config.stash[RUN_SETTINGS]
    with tempfile.TemporaryDirectory(prefix=f"torchyard-programs-{worker_id(request.config)}-") as scratch:
        yield Evaluations(settings, Path(scratch), result_cache(settings))


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    conclude_run(session, exitstatus)
    # Every report is written: what is alive now only waits for the process to end. pytest's own last step
    # collects garbage five times over (for exceptions raised in finalizers); frozen, that walks nothing.
    gc.freeze()
