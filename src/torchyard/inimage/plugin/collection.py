"""The tests a run has: each case and backend a parameter, the project's own tests marked as such, and each
case's tests grouped on one xdist worker."""

from __future__ import annotations

from pathlib import Path

import pytest

from torchyard.inimage import TEST_DIRS
from torchyard.inimage.cases import Case
from torchyard.inimage.start.settings import RunSettings
from torchyard.names import HARNESS, PROJECT, SUITE_NAMES

MARKERS = (*SUITE_NAMES, HARNESS, PROJECT)  # a marker each: which suite a test belongs to


def param(item: pytest.Item, name: str) -> object:
    """A parametrized test's value for `name` (None where it has none)."""
    callspec = getattr(item, "callspec", None)
    return callspec.params.get(name) if callspec is not None else None


def parametrize(metafunc: pytest.Metafunc, settings: RunSettings, cases: list[Case]) -> None:
    """Each test over the cases and the backends it asks for."""
    if "case" in metafunc.fixturenames:
        metafunc.parametrize("case", cases, ids=[case.name for case in cases])
    if "parity_backend" in metafunc.fixturenames:
        metafunc.parametrize("parity_backend", settings.parity_backends)
    if "compile_backend" in metafunc.fixturenames:
        metafunc.parametrize("compile_backend", settings.compile_backends)
    if "train_backend" in metafunc.fixturenames:
        metafunc.parametrize("train_backend", settings.train_backends)


def mark_items(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests outside torchyard's suites are the project's own: they carry the `project` marker (unless they
    already say which suite they belong to). A case's tests share an `xdist_group`: one worker makes its
    reference and warms its compiler once."""
    # Where xdist is not loaded (`-p no:xdist`, or not installed) the mark is unknown: a warning, or an error
    # under --strict-markers.
    grouped = any(str(line).startswith("xdist_group") for line in config.getini("markers"))
    for item in items:
        case = param(item, "case")
        if grouped and isinstance(case, Case):
            item.add_marker(pytest.mark.xdist_group(case.name))
        outside = not any(folder in Path(str(item.path)).parents for folder in TEST_DIRS)
        if outside and not any(item.get_closest_marker(name) for name in MARKERS):
            item.add_marker(PROJECT)


def suite_of(report: pytest.TestReport) -> str | None:
    """The suite a test's report belongs to, by its marker."""
    return next((name for name in MARKERS if name in report.keywords), None)
