#!/opt/torchyard/warden-python -IS
"""The first process (PID 1) of every container torchyard starts from its images: it starts the command, reaps
every process the container orphans, passes on the signals the engine sends, and ends the container at its
deadline whatever the code under test does.

    /opt/torchyard/warden SECONDS KILL_AFTER -- COMMAND [ARG ...]    (SECONDS 0: no deadline)

At the deadline every process gets SIGTERM, and KILL_AFTER seconds later the warden exits, which makes the
kernel kill what is left; it then exits 124, as timeout(1) does. It runs as the tests' own user, so the
kernel's rules for a namespace's first process are what hold it: the container's processes cannot stop or kill
it (a signal it does not wait for is dropped), and it makes itself non-dumpable first, so they cannot trace it
either. A signal it does wait for only ends the run sooner. The base's interpreter runs it isolated (`-IS`):
nothing of the project or its environment loads into it. Standard library only.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import time

TIMED_OUT = 124  # as timeout(1) exits
PASSED_ON = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT)
PR_SET_DUMPABLE = 4  # <linux/prctl.h>
REAPED_PER_PASS = 64


def _exit_code(status: int) -> int:
    code = os.waitstatus_to_exitcode(status)
    return 128 - code if code < 0 else code  # killed by a signal: as a shell reports it


def _reap(child: int, most: int = REAPED_PER_PASS) -> tuple[int | None, bool]:
    """Collect up to `most` exited processes (orphans are the warden's): the command's exit code once it has
    ended, and whether none is left. Bounded, so a flood of exiting processes never keeps the warden from its
    deadline: the attack that found it also starved the warden (SCHED_IDLE, one CPU), which a same-uid
    process may do to it."""
    ended = None
    for _ in range(most):
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return ended, True
        if pid == 0:
            return ended, True
        if pid == child:
            ended = _exit_code(status)
    return ended, False


def _signal_all(signum: int, child: int) -> None:
    """Every process of the container but the warden: kill(-1) from a namespace's first process. Anywhere else
    (run by hand, outside a container) kill(-1) would reach every process of the user: the command alone then."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(-1 if os.getpid() == 1 else child, signum)


def main(argv: list[str]) -> int:
    if len(argv) < 5 or argv[3] != "--":
        print("warden: usage: warden SECONDS KILL_AFTER -- COMMAND [ARG ...]", file=sys.stderr)
        return 125
    seconds, kill_after, command = float(argv[1]), float(argv[2]), argv[4:]
    if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        print(f"warden: cannot make itself non-dumpable: {os.strerror(ctypes.get_errno())}", file=sys.stderr)
        return 125
    waited = {signal.SIGCHLD, *PASSED_ON}
    before = signal.pthread_sigmask(signal.SIG_BLOCK, waited)
    child = os.fork()
    if child == 0:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)
        try:
            os.execvp(command[0], command)
        except OSError as error:
            print(f"warden: {command[0]}: {error.strerror}", file=sys.stderr)
        os._exit(127)
    deadline = time.monotonic() + seconds if seconds > 0 else None
    timed_out = False
    while True:
        ended, drained = _reap(child)
        if ended is not None:
            return TIMED_OUT if timed_out else ended
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            if timed_out:
                _signal_all(signal.SIGKILL, child)
                return TIMED_OUT  # the warden's exit ends the namespace: the kernel kills what is left
            timed_out = True
            _signal_all(signal.SIGTERM, child)
            deadline = time.monotonic() + kill_after
            continue
        if not drained:
            continue  # more to reap: the deadline is looked at first
        found = signal.sigwaitinfo(waited) if left is None else signal.sigtimedwait(waited, left)
        if found is not None and found.si_signo in PASSED_ON:
            with contextlib.suppress(ProcessLookupError):
                os.kill(child, found.si_signo)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
