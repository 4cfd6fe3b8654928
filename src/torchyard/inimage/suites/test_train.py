"""Training: one optimizer step per case, eager and compiled (forward and backward through AOTAutograd), with
SGD (momentum) and AdamW, against the same step in float64 on the CPU: loss, gradients, parameters,
optimizer state and updated buffers, leaf by leaf, at the run's precision."""

from __future__ import annotations

import pytest

from torchyard.inimage.cases import Case
from torchyard.inimage.evaluations import Evaluations
from torchyard.inimage.outcomes import conclude

pytestmark = pytest.mark.train


def test_one_step_matches_the_float64_step(
    case: Case, train_backend: str, evaluations: Evaluations, request: pytest.FixtureRequest
) -> None:
    conclude(request, "train", case, evaluations.train_result(case, train_backend))
