"""Run an entry's stack suites on this machine, no Docker: a venv made from the entry's lockfile."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from torchyard import cmd
from torchyard.install import extra_find_links, sync_args
from torchyard.lock import lock_path, require_fresh, uv_version
from torchyard.matrix.schema import Entry
from torchyard.mirrors import load_mirrors, sources_for


def tolerance_overrides(entry: Entry) -> str:
    """The entry's tolerance overrides as the JSON the in-image plugin reads."""
    return json.dumps(
        {
            tolerance.key: {
                "max-scaled-error": tolerance.max_scaled_error,
                "max-rel-l2": tolerance.max_rel_l2,
                "min-cosine": tolerance.min_cosine,
            }
            for tolerance in entry.tolerances
        },
        sort_keys=True,
    )


def suite_environment(entry: Entry, report_dir: Path) -> dict[str, str]:
    """What the in-image plugin reads: the same variables a container gets."""
    return {
        "TORCHYARD_ACCELERATOR": entry.accelerator.name,
        "TORCHYARD_PRECISION": entry.precision,
        "TORCHYARD_REPORT_DIR": str(report_dir),
        "TORCHYARD_TOLERANCES": tolerance_overrides(entry),
        "TORCHYARD_CASES": ",".join(entry.cases),
    }


def suite_markers(entry: Entry) -> str:
    """The pytest marker expression for the entry's suites (the harness self-tests always run)."""
    return " or ".join([*entry.suites, "harness"])


def pytest_args(entry: Entry, report_dir: Path, extra: Sequence[str]) -> tuple[str, ...]:
    return (
        "-m",
        "pytest",
        "tests/stack",
        "-m",
        suite_markers(entry),
        f"--junitxml={report_dir / 'junit.xml'}",
        "-p",
        "no:cacheprovider",
        *extra,
    )


def run_local(
    entry: Entry,
    lockdir: Path,
    reports: Path,
    extra: Sequence[str],
    *,
    runner: cmd.Runner = cmd.run,
    env: Mapping[str, str] = os.environ,
) -> int:
    """Check the lock, sync `.torchyard/venvs/<entry>` to it, install torchyard, run pytest; its status."""
    require_fresh(entry, lockdir, uv_version(runner))
    lockfile = lock_path(lockdir, entry)
    venv = Path(".torchyard") / "venvs" / entry.name
    python = venv / "bin" / "python"
    uv_env = {**env, "UV_PYTHON_DOWNLOADS": "never"}
    if not python.exists():
        runner(["uv", "venv", "--quiet", "--python", entry.python, str(venv)], env=uv_env)
    sources = sources_for(entry.indexes, load_mirrors(env))
    print(f"[1/3] installing {lockfile} into {venv}", file=sys.stderr, flush=True)
    runner(
        sync_args(
            lockfile,
            str(python),
            sources,
            find_links=extra_find_links(env),
            index_strategy=entry.accelerator.index_strategy,
        ),
        env=uv_env,
    )
    print("[2/3] installing torchyard (no dependencies) into it", file=sys.stderr, flush=True)
    runner(
        ["uv", "pip", "install", "--quiet", "--python", str(python), "--no-deps", "--no-config", "-e", "."], env=uv_env
    )
    report_dir = reports / f"{entry.name}-local"
    print(f"[3/3] running the {', '.join(entry.suites)} suites; reports in {report_dir}", file=sys.stderr, flush=True)
    completed = runner(
        [str(python), *pytest_args(entry, report_dir, extra)],
        env={**env, **suite_environment(entry, report_dir)},
        check=False,
    )
    return completed.returncode
