"""AOTInductor, opt in (`suites = [..., "aot"]`): the exported program compiled into a .pt2 package, written to
disk, loaded back by torch's package loader and run on the entry's device."""

from __future__ import annotations

import pytest

from torchyard.inimage.cases import Case
from torchyard.inimage.evaluations import Evaluations
from torchyard.inimage.outcomes import conclude
from torchyard.names import BACKEND_SUITES

pytestmark = pytest.mark.aot


@pytest.mark.parametrize("backend", [backend for backend, suite in BACKEND_SUITES.items() if suite == "aot"])
def test_aot_package_loads_and_runs(
    case: Case, backend: str, evaluations: Evaluations, request: pytest.FixtureRequest
) -> None:
    conclude(request, "aot", case, evaluations.result(case, backend))
