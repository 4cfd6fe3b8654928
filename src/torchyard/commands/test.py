"""`torchyard test`: per entry, lock check, image (built if needed), suites in a container, reports back.

Native entries (MPS) and `--local` run the same suites on this machine in a venv made from the lock, no
Docker; `--in-place` runs them in the current environment, unlocked, and the report says so. The steps are
the core's (`torchyard.pipeline`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from torchyard import pipeline
from torchyard.errors import UsageError
from torchyard.matrix.machine import Machine
from torchyard.matrix.schema import Entry
from torchyard.reports.baseline import named_baseline
from torchyard.trust import MATRIX, TRUST_ENV, RunTrust, resolve_trust
from torchyard.util import proc


def test_entries(
    entries: Sequence[Entry],
    *,
    mode: pipeline.Mode,
    lockdir: Path,
    reports: Path,
    pytest_args: Sequence[str],
    machine: Machine,
    keep: bool = False,
    trust: RunTrust | None = None,
    project: str = "",
    unsandboxed: bool = False,
    baseline: Path | None = None,
    runner: proc.Runner = proc.run,
    env: Mapping[str, str] = os.environ,
    matrix: Path = Path(MATRIX),
) -> int:
    """Run every selected entry of `matrix`; the first non-zero status is the result (all entries still run).

    `container` runs each entry in its image, except native ones (MPS), which run in a venv made from
    their lock once the host is shown to have their device; `local` runs every entry in such a venv;
    `in-place` runs in the current environment, unlocked, and says so in the report. `trust` (resolved from
    the environment when not given) decides the cache scope; an untrusted run is refused outside a
    container unless `unsandboxed`. `machine` gives the limits, mirrors and what this machine allows. Each
    entry's run is held to `baseline` (a reports folder or parity.json), else to its last trusted run here.
    """
    if baseline is not None:
        if not baseline.exists():
            raise UsageError(f"--baseline {baseline}: no such file or folder")
        for entry in entries:  # before any run: one line where the path holds no run of an entry
            named_baseline(entry.name, baseline)
    trust = trust or resolve_trust(None, env)
    return pipeline.run_tests(
        entries, mode=mode, lockdir=lockdir, reports=reports, pytest_args=pytest_args, machine=machine, trust=trust,
        keep=keep, project=project, unsandboxed=unsandboxed, baseline=baseline, runner=runner,
        env={**env, TRUST_ENV: trust.level}, matrix=matrix,
    )  # fmt: skip
