"""The in-image side: runs inside each image with torch, pytest and what the entry installs.

Nothing here imports the host side (`torchyard.matrix`, `torchyard.lock`, ...); the only shared module is
the stdlib-only `torchyard.markdown`.
"""

from pathlib import Path

INIMAGE = Path(__file__).parent
SUITES_DIR = INIMAGE / "suites"  # the suites a user reads
SELFTESTS_DIR = INIMAGE / "selftests"  # the harness's own tests
TEST_DIRS = (SUITES_DIR, SELFTESTS_DIR)
