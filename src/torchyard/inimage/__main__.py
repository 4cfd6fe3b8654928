"""Container entry point: the probe first (one line and exit 3 when the container cannot test what its
entry claims), then the stack suites with whatever pytest arguments follow."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from torchyard.inimage.plugin import PROBE_FAILED
from torchyard.inimage.probe import ProbeError, probe

TESTS = "tests/stack"


def main(argv: list[str]) -> int:
    accelerator = os.environ.get("TORCHYARD_ACCELERATOR", "cpu")
    record = os.environ.get("TORCHYARD_VENDOR_RECORD")
    try:
        probe(accelerator, Path(record) if record else None, {})
    except ProbeError as error:
        print(f"torchyard probe: {error}", file=sys.stderr)
        return PROBE_FAILED
    print(f"torchyard probe: {accelerator} ok", file=sys.stderr, flush=True)
    return int(pytest.main([os.environ.get("TORCHYARD_TESTS", TESTS), "-p", "no:cacheprovider", *argv]))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
