"""`torchyard lock`: lock the selected entries, or check their freshness offline."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from torchyard.errors import StaleLockError
from torchyard.lock.check import Freshness, lock_freshness
from torchyard.lock.lockfile import relock_hint
from torchyard.lock.resolve import lock_entry, uv_version
from torchyard.matrix.machine import Machine
from torchyard.matrix.schema import Entry
from torchyard.util import proc
from torchyard.util.markdown import markdown_table


def check_locks(entries: Sequence[Entry], lockdir: Path, *, runner: proc.Runner = proc.run) -> tuple[Freshness, ...]:
    """Report every lock's freshness; raise unless all are fresh. A missing lock is accepted only where the
    entry says `lock-on-runner = true` (its runner reaches its indexes and locks it before its image); a
    stale one never is."""
    uv = uv_version(runner)
    results = tuple(lock_freshness(entry, lockdir, uv) for entry in entries)
    rows, stale = [], []
    for entry, result in zip(entries, results, strict=True):
        detail = result.detail
        if result.status == "missing" and entry.lock_on_runner:
            labels = ", ".join(entry.accelerator.runs_on)
            detail = f"locked on its runner ({labels}) before its image: matrix.toml says lock-on-runner"
        elif result.status != "fresh":
            stale.append(result.entry)
        rows.append((result.entry, result.status, detail))
    sys.stdout.write(markdown_table(("entry", "lock", "detail"), rows))
    if stale:
        raise StaleLockError(
            f"{len(stale)} of {len(results)} locks not fresh: {', '.join(stale)}; remake them: {relock_hint(stale)}"
        )
    return results


def lock_all(
    entries: Sequence[Entry],
    lockdir: Path,
    machine: Machine,
    *,
    runner: proc.Runner = proc.run,
    env: Mapping[str, str] = os.environ,
    all_entries: bool = False,
) -> None:
    """Lock `entries` through this `machine`'s mirrors; when they are every entry (none named), those locked
    on their own runner are left to it, named: their indexes are reachable there only."""
    if all_entries:
        for entry in entries:
            if entry.lock_on_runner:
                print(f"{entry.name}: locked on its runner (lock-on-runner); name it to lock it here", file=sys.stderr)
        entries = [entry for entry in entries if not entry.lock_on_runner]
    rows = []
    for position, entry in enumerate(entries, start=1):
        print(f"[{position}/{len(entries)}] locking {entry.name} ...", file=sys.stderr, flush=True)
        started = time.monotonic()
        path = lock_entry(entry, lockdir, machine.mirrors, runner=runner, env=env)
        packages = sum(1 for line in path.read_text().splitlines() if line[:1].isalnum())
        rows.append((entry.name, str(path), packages, f"{time.monotonic() - started:.1f}"))
    sys.stdout.write(markdown_table(("entry", "lockfile", "packages", "seconds"), rows))
