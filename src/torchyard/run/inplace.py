"""Run an entry's suites with the current interpreter and whatever it has installed: no lock sync, no
container. For machines that already have their stack (a vendor-provisioned GPU box, a board, a locked-down
node). The report's environment manifest says "unlocked: this environment", lists every package with its
origin, and names the differences from the entry's lock.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Mapping, Sequence
from importlib.resources import as_file, files
from pathlib import Path

from torchyard import contract
from torchyard.errors import UsageError
from torchyard.lock.lockfile import lock_path
from torchyard.matrix.schema import Entry
from torchyard.run.environment import entry_environment
from torchyard.run.handback import reports_folder
from torchyard.run.interpreter import run_suites
from torchyard.run.scopes import local_cache
from torchyard.trust import level_of
from torchyard.util import proc


def in_place_environment(
    entry: Entry, lockdir: Path, report_dir: Path, env: Mapping[str, str], python: str = sys.executable
) -> dict[str, str]:
    """The contract's variables, plus the lock to compare this environment with (empty when it has none), and
    the entry's cache on this machine, as `--local` has it. The interpreter's own folder comes first on PATH, as
    in an activated venv: its tools are the stack's (ExecuTorch 1.2's XNNPACK lowering runs `flatc` from PATH,
    and without it failed 170 samples of an in-place sweep)."""
    lock = lock_path(lockdir, entry)
    return {
        **env,
        **entry_environment(entry, str(report_dir)),
        "PATH": f"{Path(python).parent}{os.pathsep}{env.get('PATH', '')}",  # not resolved: a venv's python links out
        contract.UNLOCKED: str(lock.resolve()) if lock.is_file() else "",
        contract.INDUCTOR_CACHE: local_cache(entry, level_of(env)),
    }


# What the suites cannot start without; the rest (ExecuTorch, Torch-TensorRT) the probe and the skips report.
STACK = ("torch", "pytest")


def require_stack(entry: Entry, lockdir: Path, python: str, required: Sequence[str] = STACK) -> None:
    """One line, not the suites' traceback, where this interpreter lacks what the suites import first (the
    interpreter torchyard itself runs in; another one is the caller's to vouch for)."""
    if python != sys.executable:
        return
    missing = [name for name in required if importlib.util.find_spec(name) is None]
    if missing:
        raise UsageError(
            f"--in-place runs the suites of entry {entry.name!r} with this interpreter ({python}), which has no "
            f"{', '.join(missing)}: install the entry's requirements into it ({lock_path(lockdir, entry)}), "
            "or run with --local (a venv made from the lock)"
        )


def run_in_place(
    entry: Entry,
    lockdir: Path,
    reports: Path,
    extra: Sequence[str],
    *,
    runner: proc.Runner = proc.run,
    env: Mapping[str, str] = os.environ,
    python: str = sys.executable,
) -> int:
    """pytest with torchyard's suites in this interpreter; the run fails closed like any other."""
    require_stack(entry, lockdir, python)
    report_dir = reports_folder(reports, f"{entry.name}-in-place")
    workdir = entry.project.root if entry.project is not None else Path.cwd()
    print(f"running {entry.name} in place with {python} (unlocked); reports in {report_dir}", file=sys.stderr)
    with as_file(files("torchyard.inimage")) as inimage:
        return run_suites(
            entry,
            python=python,
            inimage_dir=inimage,
            report_dir=report_dir,
            extra=extra,
            env=in_place_environment(entry, lockdir, report_dir, env, python),
            workdir=workdir,
            runner=runner,
        )
