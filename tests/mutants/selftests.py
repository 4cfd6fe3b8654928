"""cosmic-ray's test command for the mutation session: run the in-image self-tests named on the command line
with the stack's python, the scratch copy of torchyard first on the path; exit 0 when at least one test
passed and none failed or erred, else 1 (the mutant is killed).

The tests' own verdicts decide, from their JUnit report: a run of self-tests alone ends with the plugin's
fail-closed status (no suite test passed), whatever the self-tests found.

    python selftests.py STACK_PYTHON SCRATCH REPORTS PYTEST_ARGS...
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from xml.etree import ElementTree


def verdict(junit: Path) -> int:
    if not junit.is_file():
        return 1  # pytest did not get as far as writing its report
    suites = list(ElementTree.parse(junit).getroot().iter("testsuite"))
    fields = ("tests", "failures", "errors", "skipped")
    tests, failures, errors, skipped = (sum(int(s.get(name, 0)) for s in suites) for name in fields)
    return 0 if tests - failures - errors - skipped > 0 and not failures and not errors else 1


def main(argv: list[str]) -> int:
    stack, scratch, reports, *pytest_args = argv
    junit = Path(reports) / "junit.xml"
    junit.unlink(missing_ok=True)
    command = [stack, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "torchyard.inimage.plugin"]
    command += [f"--torchyard-report-dir={reports}/run", f"--junitxml={junit}", *pytest_args]
    env = {**os.environ, "PYTHONPATH": scratch}
    completed = subprocess.run(command, env=env, check=False, capture_output=True, text=True)
    sys.stdout.write(completed.stdout[-4000:])
    return verdict(junit)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
