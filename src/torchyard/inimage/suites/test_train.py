"""Training: one optimizer step per case, eager and compiled (forward and backward through AOTAutograd), with
SGD (momentum) and AdamW, against the same step in float64 on the CPU: loss, gradients, parameters,
optimizer state and updated buffers, leaf by leaf, at the run's precision."""

from __future__ import annotations

import pytest

from torchyard.inimage.cases import Case
from torchyard.inimage.evaluation.evaluations import Evaluations
from torchyard.inimage.evaluation.harness import Result
from torchyard.inimage.plugin.outcomes import conclude
from torchyard.inimage.plugin.verdicts import within_bounds

pytestmark = pytest.mark.train

RULE = "every leaf of the step (loss, gradients, parameters, optimizer state, buffers) within its bounds"


def passes(result: Result) -> bool:
    return within_bounds(result)


def test_one_step_matches_the_float64_step(
    case: Case, train_backend: str, evaluations: Evaluations, request: pytest.FixtureRequest
) -> None:
    result = evaluations.train_result(case, train_backend)
    conclude(request, "train", case, result, passed=passes(result), rule=RULE)
