"""torch.compile (inductor): every case compiles as users compile it (graph breaks allowed; one graph where the case
says `fullgraph`) and runs on the device."""

from __future__ import annotations

import pytest

from torchyard.inimage.cases import Case
from torchyard.inimage.evaluation.evaluations import Evaluations
from torchyard.inimage.evaluation.harness import Result
from torchyard.inimage.plugin.outcomes import conclude
from torchyard.inimage.plugin.verdicts import ran

pytestmark = pytest.mark.compile

RULE = "every call ran compiled code, with eager's output shapes"


def passes(result: Result) -> bool:
    return ran(result)


def test_inductor_compiles_and_runs(
    case: Case, compile_backend: str, evaluations: Evaluations, request: pytest.FixtureRequest
) -> None:
    result = evaluations.result(case, compile_backend)
    conclude(request, "compile", case, result, passed=passes(result), rule=RULE)
