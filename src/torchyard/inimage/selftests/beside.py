"""Work for the harness's own tests, beside the run, in children forked from the fork server (`fork_server`).

The harness tests check what a run does as a whole (its exit status, a probe that stops it before any test,
its last lines), so each needs a pytest session of its own in a process of its own (`WholeRun`). Self-tests
whose work would hold the run up (a fresh lowering imports ExecuTorch's compiler, which a warm run otherwise
never needs) run in one more child (`Job`s). `Beside` runs both on one lane, the jobs first, then the whole
runs, while the suites go on in the run's own process; the tests that check that work take its results at
the end. Where there is no fork server (not on POSIX), a whole run is a plain subprocess and the work is done
in the test that asks for it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import multiprocessing
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Mapping
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import pytest

from torchyard import contract
from torchyard.inimage.start import fork_server, proofs
from torchyard.inimage.start.fork_server import start_child, status_once_ended

TIMEOUT_S = 600.0
OUTPUT = "output.txt"  # what `Beside`'s child prints, in its folder
GRACE_S = 10.0  # beyond a whole run's TIMEOUT_S, for a stopped lane to end
# The runs test torchyard's plugin alone: the third-party plugins an image happens to have (hypothesis,
# anyio, hydra's) are not loaded into them, each costing imports and assertion rewriting per run.
ISOLATED = {contract.AUTOLOAD_OFF: "1"}


@dataclasses.dataclass(frozen=True)
class WholeRun:
    """A pytest session of its own over `files` (name and source; `conftest.py` among them where wanted),
    with torchyard's plugin alone and `args` ("{workdir}" in one stands for the run's folder); its value is
    the session's `pytest.RunResult`. Its environment is the one the run had when the tests were collected,
    as pytester makes it for a subprocess run (no PYTEST_ADDOPTS, a home of its own, no colours)."""

    files: tuple[tuple[str, str], ...]
    args: tuple[str, ...] = ()
    unset: tuple[str, ...] = ()  # variables of the run's environment the session must not see

    def run(self, workdir: Path, env: dict[str, str], context: Any) -> pytest.RunResult:
        for name, source in self.files:
            (workdir / name).write_text(source, encoding="utf-8")
        (workdir / "home").mkdir()
        env = {name: value for name, value in env.items() if name not in self.unset}
        env.update(HOME=str(workdir / "home"), USERPROFILE=str(workdir / "home"))
        args = (f"--basetemp={workdir / 'tmp'}", *(arg.replace("{workdir}", str(workdir)) for arg in self.args))
        out, err = workdir / "stdout", workdir / "stderr"
        started = time.monotonic()
        if context is None:  # no forkserver: a plain subprocess, as pytester's
            command = [sys.executable, "-m", "pytest", *args]
            with out.open("wb") as stdout, err.open("wb") as stderr:
                completed = subprocess.run(
                    command, cwd=workdir, env=env, stdout=stdout, stderr=stderr, timeout=TIMEOUT_S, check=False
                )
            status: int | pytest.ExitCode = completed.returncode
        else:
            child = context.Process(target=_child, args=(args, str(workdir), env, str(out), str(err)))
            start_child(child)
            ended = status_once_ended(child, TIMEOUT_S)
            if ended is None:
                child.kill()
                status_once_ended(child, None)
                raise TimeoutError(f"the whole run did not end within {TIMEOUT_S:.0f} s: {' '.join(args)}")
            status = ended
        with contextlib.suppress(ValueError):  # else a status of the run's own, or a signal (negative)
            status = pytest.ExitCode(status)
        return pytest.RunResult(status, _lines(out), _lines(err), time.monotonic() - started)


def whole_run_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """The environment a whole run gets, taken from `environ` as pytester changes it for a subprocess run."""
    dropped = {"PYTEST_ADDOPTS", "TOX_ENV_DIR", proofs.PROOF}  # a whole run keeps no proof of the run's
    # Nor replays or keeps a result: its planted faults lie outside what the result cache's key sees.
    kept = {contract.RERUN: "1"}
    return {**{k: v for k, v in environ.items() if k not in dropped}, "PY_COLORS": "0", **ISOLATED, **kept}


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

    def __call__(self, workdir: Path) -> Any:
        return self.target(workdir, *self.args)


class Beside:
    """Work beside the run, on one lane a thread drives, started at once: first the `Job`s, one after
    another in one child forked from the warm server; then the `WholeRun`s, each forked from the server in
    turn. `result(index)` waits for an item's value. A job that raises fails the test that asks for it,
    with the child's traceback and output; so does a child that dies, and any work that outlives
    TIMEOUT_S. Where the run is not forked (an xdist worker, or no forkserver), each item is done when its
    result is asked for, in this process (a whole run still in a process of its own)."""

    def __init__(self, work: list[Job | WholeRun], *, forked: bool = True) -> None:
        self._work = work
        self._workdir = Path(tempfile.mkdtemp(prefix="torchyard-beside-"))
        self._environment = whole_run_environment(os.environ)  # now: before any test changes it
        self._server = fork_server.context()
        self._results: dict[int, tuple[bool, Any]] = {}
        self._claimed: set[int] = set()  # whole runs a lane has taken
        self._done = threading.Condition()
        self._stopping = threading.Event()
        self._child: multiprocessing.process.BaseProcess | None = None
        self._lane: threading.Thread | None = None
        if forked and self._server is not None:
            self._lane = threading.Thread(target=self._drive, name="torchyard-beside", daemon=True)
            self._lane.start()

    def _drive(self) -> None:
        try:
            jobs = [index for index, item in enumerate(self._work) if isinstance(item, Job)]
            if jobs:
                self._run_child(jobs)
            while (index := self._claim(last=False)) is not None:
                self._finish(index, self._do(index))
        finally:
            with self._done:
                self._done.notify_all()

    def _run_child(self, jobs: list[int]) -> None:
        """The jobs in one child; each outcome as it comes (read here, so the child never waits on a pipe)."""
        assert self._server is not None
        try:
            receive, send = self._server.Pipe(duplex=False)
            work = [(index, self._work[index]) for index in jobs]
            child = self._server.Process(target=_serve, args=(work, self._workdir, send), name="torchyard-beside")
            start_child(child)
            send.close()  # the child holds the other end: its exit is the end of the pipe
        except Exception:
            for index in jobs:
                self._finish(index, (False, f"the child beside the run did not start:\n{traceback.format_exc()}"))
            return
        self._child = child
        with receive:
            while True:
                try:
                    done, ok, value = receive.recv()
                except EOFError:
                    break
                self._finish(done, (ok, value if ok else value + self._output()))
        status = status_once_ended(child, None)
        for index in jobs:
            if index not in self._results:
                self._finish(
                    index,
                    (False, f"the child beside the run ended (status {status}) before job {index}{self._output()}"),
                )

    def _do(self, index: int) -> tuple[bool, Any]:
        """Item `index`, here (a whole run in a process of its own)."""
        item = self._work[index]
        if isinstance(item, WholeRun):
            return _outcome(
                lambda workdir: item.run(workdir, self._environment, self._server), self._workdir / str(index)
            )
        return _outcome(item, self._workdir / str(index))

    def _claim(self, *, last: bool) -> int | None:
        """A whole run no one has taken, now taken: the lane takes them first to last, a test that waits
        takes them last to first."""
        with self._done:
            pending = [
                index
                for index, item in enumerate(self._work)
                if isinstance(item, WholeRun) and index not in self._claimed
            ]
            if not pending or self._stopping.is_set():
                return None
            index = pending[-1] if last else pending[0]
            self._claimed.add(index)
            return index

    def _finish(self, index: int, outcome: tuple[bool, Any]) -> None:
        with self._done:
            self._results[index] = outcome
            self._done.notify_all()

    def result(self, index: int) -> Any:
        if self._lane is None:  # done here, now
            if index not in self._results:
                self._results[index] = self._do(index)
        else:
            lane = self._lane
            # Rather than wait, this process does whole runs the lane has not reached: the two then share
            # what is left (the run's own process had nothing left to do but wait).
            while index not in self._results and (mine := self._claim(last=True)) is not None:
                self._finish(mine, self._do(mine))
            with self._done:
                ended = self._done.wait_for(lambda: index in self._results or not lane.is_alive(), TIMEOUT_S)
            if index not in self._results:
                self.stop()
                why = f"did not end within {TIMEOUT_S:.0f} s" if not ended else "was stopped before it"
                pytest.fail(f"the work beside the run {why}", pytrace=False)
        ok, value = self._results[index]
        if not ok:
            pytest.fail(value, pytrace=False)
        return value

    def _output(self) -> str:
        """The end of what the child printed (its output goes to a file, not into the run's)."""
        text = "\n".join(_lines(self._workdir / OUTPUT)[-40:])
        return f"\n--- the child's output, last lines ---\n{text}" if text else ""

    def stop(self) -> None:
        """Ends the lane, done or not (at the end of a run that stopped before taking every result): the child
        is killed; a whole run under way is let finish, and no other starts."""
        self._stopping.set()
        if self._lane is not None:
            child = self._child
            if child is not None and len(self._results) < len(self._work) and fork_server.is_alive(child):
                child.kill()
            self._lane.join(GRACE_S + TIMEOUT_S)
        shutil.rmtree(self._workdir, ignore_errors=True)


def _outcome(work: Callable[[Path], Any], workdir: Path) -> tuple[bool, Any]:
    workdir.mkdir(parents=True)
    try:
        return True, work(workdir)
    except BaseException:
        return False, f"the work this test checks failed beside the run:\n{traceback.format_exc()}"


def _serve(jobs: list[tuple[int, Job]], workdir: Path, send: Connection) -> None:
    """In the forked child: output to a file, then each job in turn (in the folder its index names), each
    outcome sent with that index once it is known."""
    _output_to(str(workdir / OUTPUT), 1, 2)
    for index, job in jobs:
        outcome = _outcome(job, workdir / str(index))
        sys.stdout.flush()  # what the job printed is in the output file before its outcome is read
        sys.stderr.flush()
        send.send((index, *outcome))
    send.close()
