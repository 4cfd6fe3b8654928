"""Whole pytest runs for the harness's own tests, forked from an interpreter that imported torch once.

The harness tests check what a run does as a whole (its exit status, a probe that stops it before any
test, its last lines), so each needs a pytest session of its own in a process of its own. Starting a
fresh interpreter for each costs an interpreter and `import torch`, seconds every time. multiprocessing's
forkserver imports the modules named in PRELOAD once, in a process that touches no device and starts no
thread, and forks one child per run from it: the child starts with torch imported, nothing initialised.

Where there is no forkserver (not on POSIX), the run is pytester's plain subprocess.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import multiprocessing.forkserver

# pytester puts sys.modules back as it found them after each test: a forkserver module first imported
# inside a test would be dropped with its server, and the next test would start (and preload) another.
# Imported here, at collection, it and its one server outlive every test.
import multiprocessing.popen_forkserver
import os
import sys
import tempfile
import time
from pathlib import Path

import pytest

from torchyard import contract

# What torchyard's plugin imports, not the plugin itself: pytest rewrites the asserts of a plugin it
# loads, and warns when that plugin was imported before it could.
PRELOAD = [
    "torch",
    "pytest",
    "torchyard.inimage.cases",
    "torchyard.inimage.parity.artifacts",
    "torchyard.inimage.parity.harness",
    "torchyard.inimage.parity.report",
    "torchyard.inimage.probe",
]
TIMEOUT_S = 600.0
# The runs test torchyard's plugin alone: the third-party plugins an image happens to have (hypothesis,
# anyio, hydra's) are not loaded into them, each a second of imports and assertion rewriting per run.
ISOLATED = {contract.AUTOLOAD_OFF: "1"}


def _forkserver() -> multiprocessing.context.ForkServerContext | None:
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return None
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(PRELOAD)
    return context


def start_server() -> None:
    """Start the server now, without waiting for it: it imports on another core while the run's first
    tests run, and is warm by the time the harness's whole runs need it (1 s of a 12 s warm run here).
    Preloading ExecuTorch as well made the run slower: its imports then compete with the tests' own."""
    if _forkserver() is not None:
        multiprocessing.forkserver.ensure_running()


def run_pytest(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    """`pytester.runpytest_subprocess(*args)` with torchyard's plugin alone, forked from the warm server."""
    context = _forkserver()
    if context is None:
        with pytest.MonkeyPatch.context() as patch:
            for name, value in ISOLATED.items():
                patch.setenv(name, value)
            return pytester.runpytest_subprocess(*args)
    run = Path(tempfile.mkdtemp(prefix="runpytest-", dir=pytester.path))
    out, err = run / "stdout", run / "stderr"
    child = context.Process(
        target=_child,
        args=((f"--basetemp={run / 'tmp'}", *args), str(pytester.path), {**os.environ, **ISOLATED}, str(out), str(err)),
        name="torchyard-inner-pytest",
    )
    started = time.monotonic()
    child.start()
    child.join(TIMEOUT_S)
    if child.exitcode is None:
        child.kill()
        child.join()
        pytest.fail(f"the inner pytest run did not end within {TIMEOUT_S:.0f} s: {' '.join(args)}")
    status: int | pytest.ExitCode = child.exitcode
    with contextlib.suppress(ValueError):  # else a status of the run's own, or a signal (negative)
        status = pytest.ExitCode(status)
    return pytest.RunResult(status, _lines(out), _lines(err), time.monotonic() - started)


def _lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8", errors="replace").splitlines() if path.exists() else []


def _child(args: tuple[str, ...], cwd: str, env: dict[str, str], out: str, err: str) -> None:
    """In the forked child: the caller's folder, environment and import path, output to files, then pytest."""
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    sys.path.insert(0, cwd)  # as `python -m pytest` run from there has it
    for fd, path in ((1, out), (2, err)):
        target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(target, fd)
        os.close(target)
    status = int(pytest.main(list(args)))
    sys.stdout.flush()
    sys.stderr.flush()
    sys.exit(status)
