"""Container entry point: pytest with the arguments the host's contract gives (`torchyard.contract`).

The probe runs once, in the plugin at pytest start-up: one line and exit 3 when the container cannot
test what its entry claims.
"""

from __future__ import annotations

import sys

import pytest


def main(argv: list[str]) -> int:
    return int(pytest.main(argv))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
