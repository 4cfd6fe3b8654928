"""Whole runs for the self-tests that check what a run does as a whole: a pytest session of its own, beside
the suites (`beside.WholeRun`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from torchyard import contract
from torchyard.inimage.selftests.beside import WholeRun

SKIPPING_SUITE = """
pytest_plugins = ["torchyard.inimage.plugin"]
"""


# The settings that decide verdicts, which the whole runs these tests start read from their own options, never
# from this run's: their planted faults are sized for float32's bounds and their own cases. The accelerator
# alone is handed on: they run on this run's device.
OWN_SETTINGS = tuple(
    setting.variable
    for setting in contract.SETTINGS
    if setting.verdicts and setting.option is not None and setting.variable != contract.ACCELERATOR
)
REPORTS = "--torchyard-report-dir={workdir}/r"


def whole_run(*args: str, conftest: str = SKIPPING_SUITE, **modules: str) -> pytest.MarkDecorator:
    """This test's whole run, beside the suites (`beside.Beside`): a pytest session of its own over a
    conftest.py and `modules` (name: source), with `args`; the test takes its `pytest.RunResult` from
    the `beside` fixture."""
    files = ((("conftest.py", conftest),) if conftest else ()) + tuple(
        (f"{name}.py", source) for name, source in modules.items()
    )
    return pytest.mark.beside.with_args(WholeRun(files, args, unset=OWN_SETTINGS))


def reports_of(result: pytest.RunResult) -> Path:
    """The reports folder a whole run wrote, as its last lines name it."""
    (line,) = [line for line in result.stdout.lines if line.startswith("torchyard: reports in ")]
    return Path(line.removeprefix("torchyard: reports in ").split(" (")[0])
