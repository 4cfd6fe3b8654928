"""A run held to its baseline: the entry's last trusted run, or one named (`torchyard test --baseline PATH`: a
reports folder, a parity.json, or a CI artifact downloaded from the default branch's run).

The last trusted run of each entry is kept on this host, under the project's name (`trust.project_scope`, which
no checkout's content decides), outside every checkout: only a trusted run writes it, as its reports are final;
an untrusted run reads it and never writes it. What it keeps is a parity.json, read back as data (bounded, never
executed). The comparison (`reports.compare`) goes into the run's parity.json (`changes`) and at the top of its
parity.md, under the host's line, so the step summary shows it; an entry's `fail-on-change` kinds fail the run.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from torchyard import contract
from torchyard.errors import UsageError
from torchyard.reports.compare import Changes, compare, plain
from torchyard.reports.files import read_json
from torchyard.reports.merge import Run, load_run, reports_under, run_of
from torchyard.util.atomic import write_atomically

KEPT = "parity.json"


def store_for(project: str, env: Mapping[str, str] = os.environ) -> Path:
    """This host's folder of the project's trusted baselines, one per entry (`$XDG_CACHE_HOME/torchyard`)."""
    cache = Path(env.get("XDG_CACHE_HOME") or Path(env.get("HOME", "~")).expanduser() / ".cache")
    return cache / "torchyard" / "baselines" / project


def named_baseline(entry: str, path: Path) -> Run:
    """The run `path` names for `entry`: the one whose run is the entry's (the host stamps the entry into each),
    or the only one where no host stamped it; one clear line otherwise."""
    reports = reports_under([path])
    runs = [load_run(report) for report in reports]
    unnamed = [run for run in runs if "entry" not in run.environment]  # a parity.json no host stamped
    mine = [run for run in runs if run.environment.get("entry") == entry] or (unnamed if len(runs) == 1 else [])
    if len(mine) != 1:
        found = ", ".join(sorted({str(run.environment.get("entry", run.name)) for run in runs})) or "none"
        raise UsageError(f"--baseline {path}: no one run of entry {entry!r} there (runs of: {found})")
    return mine[0]


def kept_baseline(entry: str, store: Path) -> Run | None:
    """The entry's last trusted run on this host, where one was kept (a kept file that does not read as a
    parity.json is said and set aside: the run is compared with nothing)."""
    kept = store / entry / KEPT
    if not kept.is_file() or kept.is_symlink():
        return None
    try:
        return load_run(kept)
    except UsageError as error:
        print(f"torchyard: the kept baseline of {entry} is set aside: {error}", file=sys.stderr)
        return None


def hold_to_baseline(
    entry: str,
    folder: Path,
    *,
    named: Path | None,
    store: Path,
    trusted: bool,
    fail_on: Sequence[str] = (),
    key: str = "",
    keep: bool = True,
    narrowed: str = "",
) -> int:
    """Compare the run in `folder` (its parity.json, as the host stamped it) with its baseline, write what
    changed into its reports (and that nothing was compared, where there is no baseline: a run cannot bring its
    own), and keep it as the entry's next baseline where the run is trusted and `keep` (a whole run of the
    entry: no pytest arguments, no named baseline). 1 where a change of a `fail_on` kind was found, else 0. A
    report that cannot be read or compared is said in one line and compared with nothing: the run's own status
    stands. `key` names what it is kept as (the reports folder's name: `cpu`, `cpu-local`; the entry's by
    default). `narrowed`: the pytest arguments a narrowed run was given (what it left out is not a change)."""
    key = key or entry
    report = folder / contract.PARITY_JSON
    if not report.is_file() or report.is_symlink():
        return 0
    baseline = named_baseline(entry, named) if named is not None else kept_baseline(key, store)
    data: Any = None
    try:
        data = read_json(report, "parity.json")  # once: compared, written back with what changed, kept
        current = run_of(report, data)
        quiet = _quiet(current) and _quiet(baseline) if baseline else False
        changes = compare(current, baseline, quiet=quiet, narrowed=narrowed) if baseline else None
        _write(folder, data, changes, fail_on)
    except (UsageError, ArithmeticError, ValueError, TypeError, RecursionError, OSError) as error:
        print(f"torchyard: {entry}: not compared with a baseline: {plain(str(error))}", file=sys.stderr)
        if isinstance(data, dict):  # what the run wrote as its own comparison goes all the same
            with contextlib.suppress(OSError, ValueError, TypeError, RecursionError):
                _write(folder, data, None, fail_on)
        return 0
    status = 0
    if changes is None:
        print(f"torchyard: {entry}: no baseline to compare with yet", file=sys.stderr)
    else:
        failing = changes.of(fail_on)
        for change in failing:
            where, said = f"{plain(change.case)} on {plain(change.backend)}", plain(change.said)
            print(f"torchyard: {entry}: {where} changed ({change.kind}): {said}")
        status = 1 if failing else 0
        print(f"torchyard: {entry}: {len(changes.changes)} changes against {changes.baseline}", file=sys.stderr)
    if trusted and keep:
        _keep(data, store / key / KEPT)
    return status


def _quiet(run: Run) -> bool:
    """Whether the run's machine was quiet while it timed its backends (env.json's `load`, as the speed table
    reads it): only then are two runs' latencies compared."""
    load = run.environment.get("load")
    return isinstance(load, dict) and load.get("loaded") is False


def _write(folder: Path, data: dict[str, Any], changes: Changes | None, fail_on: Sequence[str]) -> None:
    """`changes` into parity.json (None: no baseline, so a `changes` the run wrote itself is replaced) and at
    the top of parity.md, under its first line (the host's, or the run's title); each file replaced by rename,
    so a link the run left in its place is never written through."""
    data["changes"] = changes.as_dict() if changes is not None else None
    write_atomically(folder / contract.PARITY_JSON, json.dumps(data, indent=2, default=str) + "\n")
    if changes is None:
        return
    page = folder / contract.PARITY_MARKDOWN
    text = page.read_text(encoding="utf-8", errors="replace") if page.is_file() and not page.is_symlink() else ""
    first, _, rest = text.partition("\n")  # the host's line, or the run's own title where no host stamps it
    block = changes.markdown(fail_on)
    write_atomically(page, f"{first}\n\n{block}\n{rest}" if text else block)


def _keep(data: dict[str, Any], kept: Path) -> None:
    """The trusted run's parity.json, as read and written back, as the entry's next baseline."""
    kept.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(kept, json.dumps(data, indent=2, default=str) + "\n")
