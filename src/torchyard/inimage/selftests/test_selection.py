"""The project's own tests are selected as users select them (the entry's `tests-markers` and `tests-keyword`),
over the project's tests alone: the suites and self-tests a run selects stay selected."""

from __future__ import annotations

import pytest

from torchyard.inimage.selftests.whole_runs import REPORTS, whole_run

pytestmark = pytest.mark.harness

PROJECT_TESTS = """
import pytest

def test_dtw_fast():
    pass

@pytest.mark.slow
def test_slow():
    pass

@pytest.mark.fast
def test_fast():
    pass

@pytest.mark.fast
def test_fast_dtw():
    pass

def test_plain():
    pass
"""

SUITE_TESTS = """
import pytest

@pytest.mark.export
def test_export_slow_dtw():
    pass

@pytest.mark.harness
def test_self_dtw():
    pass
"""


@whole_run(
    REPORTS,
    "-v",
    "-p", "no:cacheprovider",
    "--torchyard-suites=export",
    "--torchyard-tests-markers=not slow",
    "--torchyard-tests-keyword=not dtw",
    test_mine=PROJECT_TESTS,
    test_suites=SUITE_TESTS,
)  # fmt: skip
def test_the_projects_tests_are_selected_by_the_entrys_and_the_callers_expressions(beside: pytest.RunResult) -> None:
    assert beside.ret == 0, beside.stdout.lines[-20:]
    passed = sorted(line.split("::")[1].split()[0] for line in beside.stdout.lines if " PASSED" in line)
    # not slow, then not dtw: the project's test_fast and test_plain; the suites' tests, whatever their names,
    # are not the project's to select.
    assert passed == ["test_export_slow_dtw", "test_fast", "test_plain", "test_self_dtw"]


@whole_run(REPORTS, "--torchyard-tests-keyword=not (", test_mine=PROJECT_TESTS)
def test_an_expression_pytest_cannot_read_stops_the_run_in_one_line(beside: pytest.RunResult) -> None:
    assert beside.ret == pytest.ExitCode.USAGE_ERROR, beside.stderr.lines[-30:]
    assert any(
        "torchyard: the project tests' keyword expression 'not (' is not a pytest expression" in line
        for line in beside.stderr.lines + beside.stdout.lines
    ), beside.stderr.lines[-5:]
