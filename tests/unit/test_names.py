"""The shared vocabulary: each backend's facts, which the host reads as the in-image side does."""

from __future__ import annotations

from torchyard.accelerators import ACCELERATORS
from torchyard.names import (
    ACCELERATOR_NAMES,
    BACKEND_DISTRIBUTIONS,
    BACKEND_FACTS,
    BACKEND_NAMES,
    BACKEND_SUITES,
    DEVICE_FACTS,
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


def test_every_accelerator_has_its_devices_facts_in_one_row_that_both_sides_read() -> None:
    """Issue 59: a new device type took three files no test asked for (the probe, the artifact key, the
    workers, which held a hand copy of the host's visible-device variables). One row each: the host's module
    selects the job's devices by the variable the in-image workers pin, and the key names the device's model
    by what the row says names it."""
    assert tuple(DEVICE_FACTS) == ACCELERATOR_NAMES == tuple(ACCELERATORS)
    for name, facts in DEVICE_FACTS.items():
        module = ACCELERATORS[name]  # what selects the job's devices: cuda's names NVIDIA's runtime's too
        selects = getattr(module, "VISIBLE_DEVICE_VARIABLES", getattr(module, "SELECTION_VARIABLES", ()))
        assert facts.named_by in ("processor", facts.torch_type), name  # `torch.<type>.get_device_name`
        if facts.visible is None:
            assert not facts.aliases and not selects, name  # one device, nothing to choose
            continue
        assert {facts.visible, *facts.aliases} <= set(selects), f"{name}: the host selects by {selects}"
