"""torch.export: every case exports, saves to .pt2, loads back and runs on the device."""

from __future__ import annotations

import pytest

from torchyard.inimage.cases import Case
from torchyard.inimage.evaluations import Evaluations
from torchyard.inimage.outcomes import conclude

pytestmark = pytest.mark.export


def test_export_save_load_run(case: Case, evaluations: Evaluations, request: pytest.FixtureRequest) -> None:
    conclude(request, "export", case, evaluations.result(case, "export"))
