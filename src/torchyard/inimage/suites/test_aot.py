"""AOTInductor, opt in (`suites = [..., "aot"]`): the exported program compiled into a .pt2 package, written to
disk, loaded back by torch's package loader and run on the entry's device."""

from __future__ import annotations

import pytest

from torchyard.inimage.cases import Case
from torchyard.inimage.evaluation.evaluations import Evaluations
from torchyard.inimage.evaluation.harness import Result
from torchyard.inimage.plugin.outcomes import conclude
from torchyard.inimage.plugin.verdicts import on_disk, ran
from torchyard.names import BACKEND_SUITES

pytestmark = pytest.mark.aot

RULE = "the AOTInductor package ran with eager's output shapes, loaded from its file on disk"


def passes(result: Result) -> bool:
    return ran(result) and on_disk(result)


@pytest.mark.parametrize("backend", [backend for backend, suite in BACKEND_SUITES.items() if suite == "aot"])
def test_aot_package_loads_and_runs(
    case: Case, backend: str, evaluations: Evaluations, request: pytest.FixtureRequest
) -> None:
    result = evaluations.result(case, backend)
    conclude(request, "aot", case, result, passed=passes(result), rule=RULE)
