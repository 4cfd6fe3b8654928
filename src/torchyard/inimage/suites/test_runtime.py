"""Runtimes without eager PyTorch in the loop: a .pte written to disk, loaded by ExecuTorch's C++ runtime and
run; Torch-TensorRT engines on CUDA."""

from __future__ import annotations

import pytest

from torchyard.inimage.cases import Case
from torchyard.inimage.evaluation.evaluations import Evaluations
from torchyard.inimage.evaluation.harness import Result
from torchyard.inimage.plugin.outcomes import conclude
from torchyard.inimage.plugin.verdicts import from_memory, on_disk, ran
from torchyard.names import BACKEND_SUITES

pytestmark = pytest.mark.runtime

# A program that runs from memory and only keeps its file (TensorRT's engines): running is enough.
RULE = "the program loaded and ran with eager's output shapes"


def passes(result: Result) -> bool:
    return ran(result) and (from_memory(result) or on_disk(result))


@pytest.mark.parametrize("backend", [backend for backend, suite in BACKEND_SUITES.items() if suite == "runtime"])
def test_runtime_loads_and_runs(
    case: Case, backend: str, evaluations: Evaluations, request: pytest.FixtureRequest
) -> None:
    result = evaluations.result(case, backend)
    conclude(request, "runtime", case, result, passed=passes(result), rule=RULE)
