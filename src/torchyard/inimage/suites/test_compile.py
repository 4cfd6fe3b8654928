"""torch.compile (inductor): every case compiles with fullgraph=True and runs on the device."""

from __future__ import annotations

import pytest

from torchyard.inimage.cases import Case
from torchyard.inimage.evaluations import Evaluations
from torchyard.inimage.outcomes import conclude

pytestmark = pytest.mark.compile


def test_inductor_compiles_and_runs(
    case: Case, compile_backend: str, evaluations: Evaluations, request: pytest.FixtureRequest
) -> None:
    conclude(request, "compile", case, evaluations.result(case, compile_backend))
