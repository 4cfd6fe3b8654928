"""Parity: every backend's outputs against eager in float64 on the CPU, under pinned precision."""

from __future__ import annotations

import pytest

from torchyard.inimage.cases import Case
from torchyard.inimage.plugin import Evaluations, conclude
from torchyard.names import BACKEND_NAMES

pytestmark = pytest.mark.parity


@pytest.mark.parametrize("backend", BACKEND_NAMES)
def test_parity(case: Case, backend: str, evaluations: Evaluations, request: pytest.FixtureRequest) -> None:
    result = evaluations.result(case, backend)
    conclude(request, "parity", case, result, passed=result.status == "passed")
