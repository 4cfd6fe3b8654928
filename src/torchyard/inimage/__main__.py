"""Container entry point: pytest with the arguments the host's contract gives (`torchyard.contract`).

The probe runs once, in the plugin at pytest start-up: one line and exit 3 when the container cannot
test what its entry claims.
"""

from __future__ import annotations

import datetime as dt
import os
import sys
from pathlib import Path

import pytest

from torchyard import contract
from torchyard.inimage import replay
from torchyard.inimage.workers import device_count, xdist_args


def main(argv: list[str]) -> int:
    accelerator = os.environ.get(contract.ACCELERATOR, "cpu")
    argv = [*argv, *xdist_args(argv, accelerator, device_count(accelerator))]
    if not replay.enabled():
        return int(pytest.main(argv))
    from torchyard.inimage.parity.artifacts import device_identity
    from torchyard.inimage.probe import torch_device

    report_dir = Path(os.environ.get(contract.REPORT_DIR, "reports"))
    device = device_identity(torch_device(accelerator))
    store, key = replay.store_for(os.environ, report_dir), replay.fingerprint(argv, os.environ, device)
    status = replay.replay(store, key, report_dir)
    if status is not None:
        return status
    started = dt.datetime.now(dt.UTC)
    status = int(pytest.main(argv))
    replay.save(store, key, report_dir, status, started)
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
