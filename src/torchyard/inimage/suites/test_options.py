"""The run's settings as the plugin reads them (`options.RunSettings`)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from torchyard.inimage.options import RunSettings
from torchyard.inimage.parity.tolerances import load_tolerances
from torchyard.names import BACKEND_NAMES

pytestmark = pytest.mark.harness


def test_an_opt_in_suites_backend_joins_parity_only_where_the_run_selected_its_suite() -> None:
    settings = RunSettings(
        accelerator="cpu", precision="fp32", report_dir=Path("reports"), tolerances=load_tolerances(),
        case_modules=(), builtin_cases=True, suites=("export", "parity"), compile_backends=("inductor",),
        vendor_record=None, precision_settings={},
    )  # fmt: skip
    assert "aotinductor" not in settings.parity_backends and "executorch-xnnpack" in settings.parity_backends
    chosen = dataclasses.replace(settings, suites=("parity", "aot"))
    assert chosen.parity_backends == tuple(BACKEND_NAMES)
