"""torch.export: every case exports, saves to .pt2, loads back and runs on the device."""

from __future__ import annotations

from pathlib import Path

import pytest

from torchyard.inimage.cases import Case
from torchyard.inimage.plugin import Evaluations, conclude

pytestmark = pytest.mark.export


def test_export_save_load_run(case: Case, evaluations: Evaluations, request: pytest.FixtureRequest) -> None:
    result = evaluations.result(case, "export")
    ran = result.status in ("passed", "failed") and result.shapes_match
    saved = result.artifact is not None and Path(result.artifact).stat().st_size > 0
    conclude(request, "export", case, result, passed=ran and saved)
