"""The in-image side: runs inside each image with torch, pytest and what the entry installs.

Nothing here imports the host side (`torchyard.matrix`, `torchyard.lock`, ...): only the stdlib-only modules
the image ships beside it (`torchyard.contract.INIMAGE_MODULES`: the contract, the shared names, the ops file
format and the small utilities), as a unit test holds.
"""

from pathlib import Path

INIMAGE = Path(__file__).parent
SUITES_DIR = INIMAGE / "suites"  # the suites a user reads
SELFTESTS_DIR = INIMAGE / "selftests"  # the harness's own tests
TEST_DIRS = (SUITES_DIR, SELFTESTS_DIR)
