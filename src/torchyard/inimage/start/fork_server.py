"""The harness's fork server: an interpreter that imports torch once (PRELOAD), from which each child the
harness's own tests need (a whole run, the lane's jobs) is forked, torch already imported and nothing
initialised; starting a fresh interpreter for each would cost an interpreter and `import torch` every time.
It touches no device and starts no thread (multiprocessing's forkserver)."""

from __future__ import annotations

import multiprocessing
import multiprocessing.connection
import multiprocessing.forkserver

# What starts a process through the server, imported here, at collection, once: a module first imported
# inside a test that puts sys.modules back afterwards (pytester does) would take its server with it.
import multiprocessing.popen_forkserver
import threading

from torchyard.names import HARNESS

# What torchyard's plugin imports, not the plugin itself: pytest rewrites the asserts of a plugin it
# loads, and warns when that plugin was imported before it could.
PRELOAD = [
    "torch",
    "pytest",
    "torchyard.inimage.cases",
    "torchyard.inimage.evaluation.cache.artifacts",
    "torchyard.inimage.evaluation.harness",
    "torchyard.inimage.report",
    "torchyard.inimage.start.probe",
    # Last: it freezes the imports above, and its exit handler must run first.
    "torchyard.inimage.start.server_last",
]


# multiprocessing's `Process.start` first reads the exit status of every other child of the process that has
# ended (its `_cleanup`), and a forkserver child's status can be read once: where two threads read it at
# once, the one that finds the pipe empty records 255 over the real status (python/cpython#130895). The
# lane's thread and the run's own thread both start and end whole runs, so every start, and every read of a
# status, holds this lock; waiting for a child to end waits on its sentinel, which reads nothing.
_REAPING = threading.Lock()


def start_child(child: multiprocessing.process.BaseProcess) -> None:
    with _REAPING:
        child.start()


def status_once_ended(child: multiprocessing.process.BaseProcess, timeout: float | None) -> int | None:
    """The child's exit status once it has ended; None if it had not within `timeout` seconds."""
    multiprocessing.connection.wait([child.sentinel], timeout)
    with _REAPING:
        return child.exitcode


def is_alive(child: multiprocessing.process.BaseProcess) -> bool:
    with _REAPING:  # `is_alive` reads the status of a child that has ended
        return child.is_alive()


def context() -> multiprocessing.context.ForkServerContext | None:
    """The server's multiprocessing context (None where there is no forkserver: not on POSIX)."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return None
    forkserver = multiprocessing.get_context("forkserver")
    forkserver.set_forkserver_preload(PRELOAD)
    return forkserver


def selects_harness(expression: str) -> bool:
    """Whether a test marked only `harness` matches the `-m` expression, as pytest itself evaluates it
    (`not harness` does not); where this pytest's evaluator is not where it was, whether it names it."""
    try:
        from _pytest.mark.expression import Expression

        def matches(name: str, /, **kwargs: str | int | bool | None) -> bool:
            return name == HARNESS

        return bool(Expression.compile(expression).evaluate(matches))
    except Exception:  # an evaluator moved or changed, or an expression that pytest itself will refuse
        return HARNESS in expression


def serves_this_run(argv: list[str]) -> bool:
    """Whether the entry point starts the server before pytest does anything, from pytest's arguments alone:
    not for an xdist controller (its workers run the harness's tests), and only where the `-m` expression,
    if any, selects them. Where this cannot tell, configuration starts it as before."""
    if any(arg.startswith(("-n", "--numprocesses")) for arg in argv):
        return False
    expressions = [argv[index + 1] for index, arg in enumerate(argv[:-1]) if arg == "-m"]
    return not expressions or selects_harness(expressions[-1])


def start_server() -> None:
    """Start the server now, without waiting for it: it imports on another core while the run does its
    own imports, and is warm by the time the lane beside the run needs it (ExecuTorch is not preloaded: its
    imports would compete with the tests' own). The in-image entry point calls this before pytest starts
    (`serves_this_run`); configuration calls it again (a no-op then)."""
    if context() is not None:
        multiprocessing.forkserver.ensure_running()
