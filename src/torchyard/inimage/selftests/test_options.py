"""The run's settings as the plugin reads them (`options.RunSettings`)."""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Iterator
from pathlib import Path
from typing import cast

import pytest

from torchyard.inimage import TEST_DIRS
from torchyard.inimage.start.proofs import of_other_suites
from torchyard.inimage.start.settings import RunSettings
from torchyard.inimage.start.tolerances import load_tolerances
from torchyard.names import BACKEND_NAMES, HARNESS, LOWERING_SUITES, SUITE_NAMES

pytestmark = pytest.mark.harness


def test_an_opt_in_suites_backend_joins_parity_only_where_the_run_selected_its_suite() -> None:
    settings = RunSettings(
        accelerator="cpu", precision="fp32", report_dir=Path("reports"), tolerances=load_tolerances(),
        case_modules=(), suites=("export", "parity"), vendor_record=None, precision_settings={},
    )  # fmt: skip
    assert "aotinductor" not in settings.parity_backends and "executorch-xnnpack" in settings.parity_backends
    chosen = dataclasses.replace(settings, suites=("parity", "aot"))
    assert chosen.parity_backends == tuple(BACKEND_NAMES)


class _Marked:
    """An item's marks, nearest first, as pytest's `iter_markers` gives them."""

    def __init__(self, *marks: pytest.Mark) -> None:
        self.marks = marks

    def iter_markers(self, name: str) -> Iterator[pytest.Mark]:
        return (mark for mark in self.marks if mark.name == name)


def test_a_suites_own_self_tests_run_only_where_the_run_has_that_suite() -> None:
    ops, general = _Marked(pytest.mark.harness("ops").mark), _Marked(pytest.mark.harness.mark)
    either, case = _Marked(pytest.mark.harness("train", "ops").mark), _Marked(pytest.mark.parity.mark)
    # A test's own harness(this_run=True) in a module marked harness("ops"): still the ops suite's.
    this_run = _Marked(pytest.mark.harness(this_run=True).mark, pytest.mark.harness("ops").mark)
    items = [ops, general, either, case, this_run]

    def left_out(suites: tuple[str, ...]) -> list[_Marked]:
        return [item for item in items if of_other_suites(cast(pytest.Item, item), suites)]

    assert left_out(("export", "train")) == [ops, this_run]
    assert left_out(("export", "parity")) == [ops, either, this_run]
    assert left_out(("ops",)) == []
    assert left_out(()) == []  # a plain pytest with the plugin names no suites: every self-test runs


def test_the_suites_a_shipped_self_test_proves_are_suites() -> None:
    named: dict[str, set[str]] = {}
    for path in [path for folder in TEST_DIRS for path in folder.glob("test_*.py")]:
        module = importlib.import_module(f"torchyard.inimage.{path.parent.name}.{path.stem}")
        tests = [getattr(module, name) for name in dir(module) if name.startswith("test_")]
        for where, marks in [("", getattr(module, "pytestmark", []))] + [
            (f"::{test.__name__}", getattr(test, "pytestmark", [])) for test in tests
        ]:
            for mark in marks if isinstance(marks, list) else [marks]:
                if mark.name == HARNESS and mark.args:
                    named[f"{path.stem}{where}"] = set(mark.args)
    lowering = set(LOWERING_SUITES)
    assert named == {
        "test_ops_harness": {"ops"},
        "test_train_harness": {"train"},
        "test_artifacts": lowering,
        "test_xnnpack_patterns": lowering,
        "test_localize": lowering,
        "test_localize::test_a_wrong_pass_in_a_compiled_training_step_is_named_by_the_bisector": {"train"},
        "test_localize::test_a_compiled_step_that_misses_as_eager_does_is_not_blamed_on_a_compiler_step": {"train"},
        "test_localize::test_every_stage_the_bisector_can_name_has_words": {"compile", "train"},
        "test_result_cache": set(SUITE_NAMES) - {"ops"},
        "test_records": {"parity"},
        "test_compiled": {"compile", "parity", "train"},
        "test_channels_last": {"train"},
        "test_report_lines::test_a_graph_break_is_counted_and_named_and_fails_only_a_case_that_needs_one_graph": {
            "compile",
            "parity",
        },
        "test_report_lines::test_a_recompilation_is_counted_with_the_guard_that_failed": {"compile", "parity"},
        "test_report_lines::test_an_entry_that_says_fullgraph_holds_each_case_to_one_graph": {"compile", "parity"},
        "test_report_lines::test_a_delegates_share_of_the_program_is_recorded_and_what_it_left_out_named": {
            "runtime",
            "parity",
        },
    }
    assert all(suites <= set(SUITE_NAMES) for suites in named.values())
    assert "train" not in lowering and {"export", "compile", "runtime", "parity"} <= lowering
