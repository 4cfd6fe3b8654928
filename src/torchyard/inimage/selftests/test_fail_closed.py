"""A run that cannot test honestly fails closed: a selected suite with no test passed, or no test passed
outside the harness."""

from __future__ import annotations

import pytest

from torchyard.inimage.plugin.fail_closed import NOT_INSTALLED
from torchyard.inimage.selftests.whole_runs import REPORTS, reports_of, whole_run

pytestmark = pytest.mark.harness


def mixed_suites(export_body: str) -> str:
    """A module of a harness self-test, an export test with this body and a compile test that passes."""
    return (
        "import pytest\n\n"
        "@pytest.mark.harness\ndef test_self():\n    pass\n\n"
        f"@pytest.mark.export\ndef test_export():\n    {export_body}\n\n"
        "@pytest.mark.compile\ndef test_compile():\n    pass\n"
    )


@whole_run(REPORTS, "--torchyard-suites=export,compile", test_mixed=mixed_suites("pytest.skip('no exporter here')"))
def test_a_selected_suite_with_nothing_passed_fails_the_run(beside: pytest.RunResult) -> None:
    result = beside
    assert result.ret == 1
    result.stdout.fnmatch_lines(["*suite export: no test passed; skip reasons: no exporter here*"])
    assert "suite compile" not in result.stdout.str()


@whole_run(REPORTS, test_self="import pytest\n\n@pytest.mark.harness\ndef test_self():\n    pass\n")
def test_a_run_where_only_the_harness_passed_fails(beside: pytest.RunResult) -> None:
    """The self-tests never stand for the suites: passing alone, they leave the run failed."""
    assert beside.ret == 1
    beside.stdout.fnmatch_lines(["*torchyard: FAILED: no test passed (every test skipped, or none ran)*"])


@whole_run(
    REPORTS,
    "--torchyard-suites=export,compile",
    test_each=mixed_suites("pass") + "\n@pytest.mark.export\ndef test_export_skipped():\n    pytest.skip('not here')\n",
)
def test_a_run_where_each_selected_suite_passed_a_test_passes(beside: pytest.RunResult) -> None:
    assert beside.ret == 0, beside.stdout.lines[-20:]
    assert "FAILED" not in beside.stdout.str()


@whole_run(REPORTS, test_mine="def test_mine():\n    pass\n")
def test_a_run_of_a_projects_own_tests_that_pass_passes(beside: pytest.RunResult) -> None:
    """No suite selected, the project's tests alone: they count as tests that passed."""
    assert beside.ret == 0, beside.stdout.lines[-20:]


@whole_run(REPORTS, test_skips="import pytest\n\ndef test_a():\n    pytest.skip('no device')\n")
def test_all_skipped_run_fails(beside: pytest.RunResult) -> None:
    result = beside
    assert result.ret == 1
    result.stdout.fnmatch_lines(["*FAILED: suite project: no test passed; skip reasons: no device*"])


@whole_run(REPORTS)
def test_no_test_collected_fails(beside: pytest.RunResult) -> None:
    assert beside.ret == 1


@whole_run(
    REPORTS,
    "--torchyard-suites=export,compile",
    test_fine=mixed_suites("pass"),
    test_broken="import no_such_module_of_the_projects\n",
)
def test_a_file_that_cannot_be_collected_is_named_with_its_error(beside: pytest.RunResult) -> None:
    """Not "no test collected" for every suite: nothing ran because one file could not be imported."""
    assert beside.ret == pytest.ExitCode.INTERRUPTED
    said = "could not collect test_broken.py: ModuleNotFoundError: No module named 'no_such_module_of_the_projects'"
    said += f" ({NOT_INSTALLED})"
    beside.stdout.fnmatch_lines([f"*torchyard: FAILED: {said}*"])
    assert "no test passed" not in beside.stdout.str()
    assert (
        f"**Not collected**: {said.removeprefix('could not collect ')}"
        in (reports_of(beside) / "parity.md").read_text()
    )


CRASHING = """
import os
import signal
from pathlib import Path


def test_before():
    pass


def test_crashes(request):
    running = Path(request.config.getoption("--torchyard-report-dir")) / "running.txt"
    print("RUNNING:", running.read_text().strip(), flush=True)
    os.kill(os.getpid(), signal.SIGSEGV)  # as a backend's runtime that faults ends the process
"""


@whole_run(REPORTS, "-s", "-p", "no:faulthandler", test_crashing=CRASHING)
def test_the_test_a_run_dies_in_is_named_for_the_host(beside: pytest.RunResult) -> None:
    """A native crash ends the process before any report: the reports folder holds the test it was in
    (`contract.RUNNING`), which the host names with the signal (`run.handback.crash_note`)."""
    assert beside.ret == -11, beside.stdout.lines[-20:]
    beside.stdout.fnmatch_lines(["*RUNNING: test_crashing.py::test_crashes"])
