"""Runtimes without eager PyTorch in the loop: a .pte written to disk, loaded by ExecuTorch's C++ runtime and
run; Torch-TensorRT engines on CUDA."""

from __future__ import annotations

import pytest

from torchyard.inimage.cases import Case
from torchyard.inimage.evaluations import Evaluations
from torchyard.inimage.outcomes import conclude
from torchyard.names import BACKEND_SUITES

pytestmark = pytest.mark.runtime


@pytest.mark.parametrize("backend", [backend for backend, suite in BACKEND_SUITES.items() if suite == "runtime"])
def test_runtime_loads_and_runs(
    case: Case, backend: str, evaluations: Evaluations, request: pytest.FixtureRequest
) -> None:
    conclude(request, "runtime", case, evaluations.result(case, backend))
