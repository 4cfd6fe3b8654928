"""Parity: every backend's outputs against eager in float64 on the CPU, under pinned precision."""

from __future__ import annotations

import pytest

from torchyard.inimage.cases import Case
from torchyard.inimage.evaluation.evaluations import Evaluations
from torchyard.inimage.evaluation.harness import Result
from torchyard.inimage.plugin.outcomes import conclude
from torchyard.inimage.plugin.verdicts import within_bounds

pytestmark = pytest.mark.parity

RULE = "every output within its bounds of the float64 reference"


def passes(result: Result) -> bool:
    return within_bounds(result)


def test_parity(case: Case, parity_backend: str, evaluations: Evaluations, request: pytest.FixtureRequest) -> None:
    """Every backend (each torch.compile mode the entry asks for is one) against the CPU reference."""
    result = evaluations.result(case, parity_backend)
    conclude(request, "parity", case, result, passed=passes(result), rule=RULE)
