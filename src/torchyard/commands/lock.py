"""`torchyard lock`: lock the selected entries, or check their freshness offline."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path

from torchyard.errors import StaleLockError, UsageError
from torchyard.lock.check import Freshness, check_entry
from torchyard.lock.resolve import lock_entry, uv_version
from torchyard.matrix.machine import load_mirrors
from torchyard.matrix.schema import Entry
from torchyard.util import proc
from torchyard.util.markdown import markdown_table


def check_locks(
    entries: Sequence[Entry],
    lockdir: Path,
    *,
    allow_missing: Collection[str] = (),
    runner: proc.Runner = proc.run,
) -> tuple[Freshness, ...]:
    """Report every lock's freshness; raise unless all are fresh, the entries named in `allow_missing` (those
    whose indexes this machine cannot reach) excepted when their lock is missing. Naming them keeps a deleted
    lock of any other entry a failure."""
    unknown = sorted(set(allow_missing) - {entry.name for entry in entries})
    if unknown:
        raise UsageError(f"--allow-missing {unknown[0]}: no such entry ({', '.join(entry.name for entry in entries)})")
    uv = uv_version(runner)
    results = tuple(check_entry(entry, lockdir, uv) for entry in entries)
    sys.stdout.write(markdown_table(("entry", "lock", "detail"), [(r.entry, r.status, r.detail) for r in results]))
    stale = [
        result.entry
        for result in results
        if result.status != "fresh" and not (result.status == "missing" and result.entry in allow_missing)
    ]
    if stale:
        raise StaleLockError(f"{len(stale)} of {len(results)} locks not fresh: {', '.join(stale)}")
    return results


def lock_all(
    entries: Sequence[Entry],
    lockdir: Path,
    *,
    runner: proc.Runner = proc.run,
    env: Mapping[str, str] = os.environ,
) -> None:
    mirrors = load_mirrors(env)
    rows = []
    for position, entry in enumerate(entries, start=1):
        print(f"[{position}/{len(entries)}] locking {entry.name} ...", file=sys.stderr, flush=True)
        started = time.monotonic()
        path = lock_entry(entry, lockdir, mirrors, runner=runner, env=env)
        packages = sum(1 for line in path.read_text().splitlines() if line[:1].isalnum())
        rows.append((entry.name, str(path), packages, f"{time.monotonic() - started:.1f}"))
    sys.stdout.write(markdown_table(("entry", "lockfile", "packages", "seconds"), rows))
