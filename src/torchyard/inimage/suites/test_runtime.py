"""Runtimes without eager PyTorch in the loop: a .pte written to disk, loaded by ExecuTorch's C++ runtime and
run; Torch-TensorRT engines on CUDA."""

from __future__ import annotations

from pathlib import Path

import pytest

from torchyard.inimage.cases import Case
from torchyard.inimage.plugin import Evaluations, conclude
from torchyard.names import BACKEND_SUITES

pytestmark = pytest.mark.runtime


@pytest.mark.parametrize("backend", [backend for backend, suite in BACKEND_SUITES.items() if suite == "runtime"])
def test_runtime_loads_and_runs(
    case: Case, backend: str, evaluations: Evaluations, request: pytest.FixtureRequest
) -> None:
    result = evaluations.result(case, backend)
    ran = result.status in ("passed", "failed") and result.shapes_match
    on_disk = backend == "tensorrt" or (result.artifact is not None and Path(result.artifact).stat().st_size > 0)
    conclude(request, "runtime", case, result, passed=ran and on_disk)
