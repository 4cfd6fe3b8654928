"""The noise rule: a fault sized against what float32 itself makes of an output fails at ten times that error and
passes at three, dense, in one channel or in 1 % of the elements, where the table's bounds alone pass them all;
an override that loosens a bound turns it off; a reference no finer than the run has no noise to hold to."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from torchyard.inimage.cases import Case
from torchyard.inimage.evaluation.harness import evaluate, make_reference
from torchyard.inimage.evaluation.training import make_train_reference, train_runner
from torchyard.inimage.selftests.planted import BY_NAME, TOLERANCES, on_cpu, planted
from torchyard.inimage.start.probe import CPU
from torchyard.inimage.start.tolerances import load_tolerances
from torchyard.names import NOISE_MISS

pytestmark = pytest.mark.harness

Mask = Callable[[torch.Tensor], torch.Tensor]
MASKS: dict[str, Mask] = {
    "dense": torch.ones_like,
    "one column": lambda out: torch.zeros_like(out).index_fill_(-1, torch.tensor([0]), 1.0),
    "1% of elements": lambda out: (torch.arange(out.numel()) % 100 == 7).reshape(out.shape).to(out.dtype),
}


def faulted(case: Case, mask: Mask, multiple: float, tmp_path: Path) -> tuple[str, str]:
    """`case`'s first output scaled by 1 + d where `mask` is 1, d such that the fault alone moves the output by
    `multiple` times eager float32's own relative L2 error: the verdict and its reason."""
    reference = make_reference(case, case.calls(), device=CPU, dtype=torch.float32)
    noise = reference.noise[0][0]
    assert noise is not None, reference.kind
    clean = reference.outputs[0][0]
    assert isinstance(clean, torch.Tensor)
    where = mask(clean)
    size = multiple * noise[1] * float(clean.norm()) / float((clean * where).norm())

    def fault(leaf: object) -> object:
        if isinstance(leaf, torch.Tensor) and leaf.shape == clean.shape:
            return (leaf.double() * (1 + size * where)).to(leaf.dtype)
        return leaf

    result = on_cpu(case, planted(fault), tmp_path)
    return result.status, result.reason


@pytest.mark.parametrize("where", MASKS)
def test_a_fault_ten_times_float32s_own_error_fails_and_three_times_passes(where: str, tmp_path: Path) -> None:
    mlp = BY_NAME["mlp"]
    status, reason = faulted(mlp, MASKS[where], 10.0, tmp_path / "ten")
    assert status == "failed" and NOISE_MISS in reason, reason
    assert "the table's bounds 0.0001, 1e-05 pass it" in reason, reason
    status, reason = faulted(mlp, MASKS[where], 3.0, tmp_path / "three")
    assert status == "passed", reason


def test_an_override_that_loosens_a_bound_turns_the_rule_off_and_one_that_names_it_keeps_it() -> None:
    tolerances = load_tolerances('{"float32.inductor": {"max-rel-l2": 1e-4}}')
    assert tolerances.bounds("float32", "inductor").noise_factor == 0.0
    assert tolerances.bounds("float32", "export").noise_factor == 8.0
    assert tolerances.bounds("bfloat16", "export").noise_factor == 0.0  # not measured: off
    named = load_tolerances('{"float32.inductor": {"max-rel-l2": 1e-4, "noise-factor": 20}}')
    assert named.bounds("float32", "inductor").noise_factor == 20.0
    by_case = TOLERANCES.bounds("float32", "export", {"float32.*": {"max-scaled-error": 1e-3}})
    assert by_case.noise_factor == 0.0 and by_case.max_scaled_error == 1e-3


class CastsInside(torch.nn.Module):
    """Computes in float32 whatever it is given: eager in float32 is the float64 reference exactly."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.linear.float()(x.float())
        return out.to(x.dtype)


def test_a_reference_no_finer_than_the_run_has_no_noise_to_hold_to() -> None:
    case = Case("casts_inside", CastsInside, lambda g: (torch.randn(2, 4, generator=g),))
    reference = make_reference(case, case.calls(), device=CPU, dtype=torch.float32)
    assert "float32 in effect" in reference.kind and reference.noise == []
    measured = make_reference(BY_NAME["mlp"], BY_NAME["mlp"].calls(), device=CPU, dtype=torch.float32)
    assert measured.noise and all(error is not None for error in measured.noise[0])


@pytest.mark.parametrize(("multiple", "fails"), [(10.0, True), (3.0, False)], ids=["ten", "three"])
def test_a_training_steps_fault_ten_times_float32s_own_error_fails_and_three_times_passes(
    multiple: float, fails: bool, tmp_path: Path
) -> None:
    """The step is held the same way (issue 68: a gradient 1e-5 off passed at 11-39 times the step's noise). SGD's
    first momentum buffer is the gradient it steps on: scaled by 1 + d, d the multiple of float32's own error on
    that leaf (or the precision's spread, where wider), it fails at ten times and passes at three."""
    mlp = BY_NAME["mlp"]
    made = make_train_reference(mlp, "sgd", device=CPU, dtype=torch.float32)
    names = made.reference.paths
    buffers = [index for index, name in enumerate(names) if name.endswith(".momentum_buffer")]
    noise = [made.reference.noise[0][index] for index in buffers]
    assert all(found is not None for found in noise), made.reference.kind
    size = multiple * max(found[1] for found in noise if found is not None)
    result = evaluate(
        mlp, "train-eager-sgd", device=CPU, dtype=torch.float32, weights=torch.float32, tolerances=TOLERANCES,
        workdir=tmp_path, reference=made.reference,
        runner=train_runner("train-eager-sgd", torch.float32, made.frozen, lambda grad: grad * (1 + size)),
    )  # fmt: skip
    missed = [comparison for comparison in result.comparisons if not comparison.passed]
    if fails:
        assert result.status == "failed" and NOISE_MISS in result.reason, result.reason
        assert any(comparison.output.endswith(".momentum_buffer") for comparison in missed), result.reason
    else:
        assert result.status == "passed", result.reason
