"""The shared vocabulary: each backend's facts, which the host reads as the in-image side does."""

from __future__ import annotations

from torchyard.names import (
    BACKEND_DISTRIBUTIONS,
    BACKEND_FACTS,
    BACKEND_NAMES,
    BACKEND_SUITES,
    SUITE_NAMES,
    module_name,
)


def test_every_backend_has_its_facts_in_one_row() -> None:
    assert tuple(BACKEND_FACTS) == BACKEND_NAMES
    for name, facts in BACKEND_FACTS.items():
        assert facts.suite in SUITE_NAMES and facts.suite != "train", name  # train's backends are their own
        assert facts.distributions and all(facts.distributions), name
        assert BACKEND_SUITES[name] == facts.suite


def test_the_distributions_are_each_backends_once_in_order() -> None:
    assert BACKEND_DISTRIBUTIONS[0] == "torch"
    assert len(set(BACKEND_DISTRIBUTIONS)) == len(BACKEND_DISTRIBUTIONS)
    assert set(BACKEND_DISTRIBUTIONS) == {name for facts in BACKEND_FACTS.values() for name in facts.distributions}
    assert {"executorch", "torch-tensorrt", "tensorrt"} <= set(BACKEND_DISTRIBUTIONS)


def test_a_distribution_is_imported_and_recorded_by_its_module_name() -> None:
    assert module_name("torch-tensorrt") == "torch_tensorrt"
    assert module_name("executorch") == "executorch"
