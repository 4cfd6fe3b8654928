"""torch.export: every case exports, saves to .pt2, loads back and runs on the device."""

from __future__ import annotations

import pytest

from torchyard.inimage.cases import Case
from torchyard.inimage.evaluation.evaluations import Evaluations
from torchyard.inimage.evaluation.harness import Result
from torchyard.inimage.plugin.outcomes import conclude
from torchyard.inimage.plugin.verdicts import on_disk, ran
from torchyard.names import BACKEND_SUITES

pytestmark = pytest.mark.export

RULE = "the exported program ran with eager's output shapes, saved and loaded back"


def passes(result: Result) -> bool:
    return ran(result) and on_disk(result)


@pytest.mark.parametrize("backend", [backend for backend, suite in BACKEND_SUITES.items() if suite == "export"])
def test_export_save_load_run(
    case: Case, backend: str, evaluations: Evaluations, request: pytest.FixtureRequest
) -> None:
    result = evaluations.result(case, backend)
    conclude(request, "export", case, result, passed=passes(result), rule=RULE)
