"""Run an entry's suites with a Python on this machine (a venv's, or the current interpreter): the same
pytest command line as a container, one run at a time per reports folder, from an empty folder."""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from torchyard import contract
from torchyard.matrix.schema import Entry
from torchyard.run.handback import crash_note, exclusive_run, fresh_folder
from torchyard.util import proc


def run_suites(
    entry: Entry,
    *,
    python: str,
    inimage_dir: Path,
    report_dir: Path,
    extra: Sequence[str],
    env: Mapping[str, str],
    workdir: Path,
    runner: proc.Runner,
) -> int:
    """`python -m torchyard.inimage` with the contract's arguments; its exit status."""
    args = contract.pytest_args(
        inimage_dir=str(inimage_dir),
        report_dir=str(report_dir),
        suites=entry.suites,
        project_tests=entry.tests,
        extra=extra,
    )
    with exclusive_run(report_dir):
        fresh_folder(report_dir)
        run_env = {**env, **contract.plugin_environment(project_tests=entry.tests, extra=extra)}
        status = runner([python, "-m", "torchyard.inimage", *args], env=run_env, cwd=workdir, check=False).returncode
    crashed = crash_note(report_dir, status, in_container=False)
    if crashed is not None:
        print(f"torchyard: entry {entry.name!r}: {crashed}", file=sys.stderr)
    return status
