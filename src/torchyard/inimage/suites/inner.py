"""Work for the harness's own tests in children forked from an interpreter that imported torch once.

The harness tests check what a run does as a whole (its exit status, a probe that stops it before any
test, its last lines), so each needs a pytest session of its own in a process of its own. Starting a
fresh interpreter for each costs an interpreter and `import torch`, seconds every time. multiprocessing's
forkserver imports the modules named in PRELOAD once, in a process that touches no device and starts no
thread, and forks one child per run from it: the child starts with torch imported, nothing initialised.

The same server forks `Beside`'s child: self-tests whose work would hold the run up for seconds (a fresh
lowering imports ExecuTorch's compiler, which a warm run otherwise never needs) run there, on a core the
suites leave idle, while the suites go on; the tests that check that work take its results at the end.

Where there is no forkserver (not on POSIX), a run is pytester's plain subprocess and `Beside`'s work is
done in the test that asks for it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import multiprocessing
import multiprocessing.forkserver

# pytester puts sys.modules back as it found them after each test: a forkserver module first imported
# inside a test would be dropped with its server, and the next test would start (and preload) another.
# Imported here, at collection, it and its one server outlive every test.
import multiprocessing.popen_forkserver
import os
import shutil
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

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
    "torchyard.inimage.suites.server_exit",  # last: the server's own exit handler, which must run first
]
TIMEOUT_S = 600.0
OUTPUT = "output.txt"  # what `Beside`'s child prints, in its folder
GRACE_S = 10.0  # for `Beside`'s child to end by itself once it has sent every result
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
    _output_to(out, 1)
    _output_to(err, 2)
    status = int(pytest.main(list(args)))
    sys.stdout.flush()
    sys.stderr.flush()
    sys.exit(status)


def _output_to(path: str, *fds: int) -> None:
    """In a forked child: what it writes to `fds` goes to the file at `path` (made afresh, owner only)."""
    target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    for fd in fds:
        os.dup2(target, fd)
    os.close(target)


@dataclasses.dataclass(frozen=True)
class Job:
    """`target(workdir, *args)`, in a fresh folder: its return value is sent back, so it must pickle."""

    target: Callable[..., Any]
    args: tuple[Any, ...] = ()


class Beside:
    """Jobs run one after another in one child forked from the warm server, started at once and left to
    run beside the tests; `result(index)` waits for a job's value. A job that raises fails the test that
    asks for it, with the child's traceback; so does a child that dies or outlives TIMEOUT_S. Not forked
    (or with no forkserver), a job is done when its result is asked for, in this process."""

    def __init__(self, jobs: list[Job], *, forked: bool = True) -> None:
        self._jobs = jobs
        self._workdir = Path(tempfile.mkdtemp(prefix="torchyard-beside-"))
        self._results: dict[int, tuple[bool, Any]] = {}
        context = _forkserver() if forked else None
        self._process: multiprocessing.process.BaseProcess | None = None
        self._receive: Connection | None = None
        self._starting: threading.Thread | None = None
        self._unstarted = ""
        if context is not None:
            # Starting a child waits for the server to have imported torch: a thread waits instead of the run.
            self._starting = threading.Thread(target=self._start, args=(context,), name="torchyard-beside")
            self._starting.start()

    def _start(self, context: multiprocessing.context.ForkServerContext) -> None:
        try:
            receive, send = context.Pipe(duplex=False)
            process = context.Process(target=_serve, args=(self._jobs, self._workdir, send), name="torchyard-beside")
            process.start()
            send.close()  # the child holds the other end: its exit is the end of the pipe
            self._process, self._receive = process, receive
        except Exception:  # each test that asks for a job fails with it
            self._unstarted = traceback.format_exc()

    def result(self, index: int) -> Any:
        if self._starting is None:  # no forkserver: the work is done here, now
            if index not in self._results:
                self._results[index] = _outcome(self._jobs[index], self._workdir / str(index))
        else:
            self._starting.join()
            self._collect(index)
        ok, value = self._results[index]
        if not ok:
            pytest.fail(f"the work this test checks failed beside the run:\n{value}{self._output()}", pytrace=False)
        return value

    def _output(self) -> str:
        """The end of what the child printed (its output goes to a file, not into the run's)."""
        text = "\n".join(_lines(self._workdir / OUTPUT)[-40:])
        return f"\n--- the child's output, last lines ---\n{text}" if text else ""

    def _collect(self, index: int) -> None:
        if self._process is None or self._receive is None:
            pytest.fail(f"the child beside the run did not start:\n{self._unstarted}", pytrace=False)
        deadline = time.monotonic() + TIMEOUT_S
        while index not in self._results:
            if not self._receive.poll(max(0.0, deadline - time.monotonic())):
                self.stop()
                pytest.fail(f"the work beside the run did not end within {TIMEOUT_S:.0f} s", pytrace=False)
            try:
                done, ok, value = self._receive.recv()
            except EOFError:
                self._process.join()
                status = self._process.exitcode
                pytest.fail(f"the child beside the run ended (status {status}) before job {index}{self._output()}")
            self._results[done] = (ok, value)

    def stop(self) -> None:
        """Ends the child, done or not (at the end of a run that stopped before taking every result)."""
        if self._starting is not None:
            self._starting.join()
        if self._process is not None:
            if len(self._results) == len(self._jobs):  # done: let it end as it would, handlers and all
                self._process.join(GRACE_S)
            if self._process.is_alive():
                self._process.kill()
                self._process.join()
        if self._receive is not None:
            self._receive.close()
        shutil.rmtree(self._workdir, ignore_errors=True)


def _outcome(job: Job, workdir: Path) -> tuple[bool, Any]:
    workdir.mkdir(parents=True)
    try:
        return True, job.target(workdir, *job.args)
    except BaseException:
        return False, traceback.format_exc()


def _serve(jobs: list[Job], workdir: Path, send: Connection) -> None:
    """In the forked child: output to a file, then each job in turn, each outcome sent once it is known."""
    _output_to(str(workdir / OUTPUT), 1, 2)
    for index, job in enumerate(jobs):
        send.send((index, *_outcome(job, workdir / str(index))))
    send.close()
