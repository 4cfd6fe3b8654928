"""Parity: every backend's outputs against eager in float64 on the CPU, under pinned precision."""

from __future__ import annotations

import pytest

from torchyard.inimage.cases import Case
from torchyard.inimage.evaluations import Evaluations
from torchyard.inimage.outcomes import conclude

pytestmark = pytest.mark.parity


def test_parity(case: Case, parity_backend: str, evaluations: Evaluations, request: pytest.FixtureRequest) -> None:
    """Every backend (each torch.compile mode the entry asks for is one) against the CPU reference."""
    conclude(request, "parity", case, evaluations.result(case, parity_backend))
