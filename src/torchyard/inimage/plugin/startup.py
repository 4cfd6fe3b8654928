"""The controller's start, before any test: the entry's device and precision checked, the environment
probed (the manifest env.json records) and the machine's load sampled. A run that cannot test what its
entry claims stops here, with one line and the probe's exit status."""

from __future__ import annotations

import platform
from typing import Any

import pytest
import torch

from torchyard import contract
from torchyard.inimage.start import loadavg
from torchyard.inimage.start.precision import PrecisionError, check_precision
from torchyard.inimage.start.probe import ProbeError, probe, torch_device
from torchyard.inimage.start.settings import RunSettings

MANIFEST = pytest.StashKey[dict[str, Any]]()
LOAD_AT_START = pytest.StashKey[list[float] | None]()


def probe_run(config: pytest.Config, settings: RunSettings) -> None:
    """Probe what the run tests into `config`'s stash (`MANIFEST`, `LOAD_AT_START`), or stop the run."""
    try:
        device = torch_device(settings.accelerator)
        check_precision(settings.precision, device.type, _capability(settings), macos=_macos())
        config.stash[MANIFEST] = probe(
            settings.accelerator,
            settings.vendor_record,
            settings.precision_settings,
            settings.unlocked,
            trust=settings.trust,
        )
    except (ProbeError, PrecisionError) as error:
        pytest.exit(f"torchyard probe: {error}", returncode=contract.PROBE_FAILED)
    config.stash[LOAD_AT_START] = loadavg.sample()  # before any test: what others run (`loadavg`)


def _macos() -> tuple[int, int] | None:
    release = platform.mac_ver()[0]
    parts = [int(part) for part in release.split(".")[:2] if part.isdigit()]
    return (parts[0], parts[1] if len(parts) > 1 else 0) if parts else None


def _capability(settings: RunSettings) -> tuple[int, int] | None:
    if settings.accelerator == "cuda" and torch.cuda.is_available():
        return torch.cuda.get_device_capability(0)
    return None
