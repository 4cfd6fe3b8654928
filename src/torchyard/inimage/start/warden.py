#!/opt/torchyard/warden-python -IS
"""The first process (PID 1) of every container torchyard starts from its images: it starts the command, reaps
every process the container orphans, passes on the signals the engine sends, and ends the container at its
deadline whatever the code under test does.

    /opt/torchyard/warden SECONDS KILL_AFTER UID:GID[:GROUP,...] -- COMMAND [ARG ...]    (SECONDS 0: no deadline)

At the deadline every process gets SIGTERM, and KILL_AFTER seconds later the warden exits, which makes the
kernel kill what is left; it then exits 124, as timeout(1) does.

It starts as root with four capabilities (KILL, SETUID, SETGID, SETPCAP). It starts the command as UID:GID,
with those supplementary groups and in a session of its own, with no capability, not even in its bounding
set. Then it keeps KILL alone, to end the container's processes. So the command and all it starts are another
user's: they cannot signal, trace or reschedule it (a process may starve another of its own user, and a
starved warden missed its deadline). As a namespace's first process it drops any signal it does not wait for;
one it waits for only ends the run sooner. As root it never starts the command as root. Started as anyone
else (by hand, on a host) it runs the command as itself and refuses any other UID:GID.

The base's interpreter runs it isolated (`-IS`): nothing of the project or its environment loads into it.
Standard library only.
"""

from __future__ import annotations

import contextlib
import ctypes
import grp
import os
import signal
import sys
import time

TIMED_OUT = 124  # as timeout(1) exits
PASSED_ON = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT)
PR_SET_DUMPABLE = 4  # <linux/prctl.h>
PR_CAPBSET_DROP = 24
CAP_KILL, CAP_SETGID, CAP_SETUID, CAP_SETPCAP = 5, 6, 7, 8  # <linux/capability.h>
CAPABILITY_VERSION_3 = 0x20080522
REAPED_PER_PASS = 64
USAGE = "warden: usage: warden SECONDS KILL_AFTER UID:GID[:GROUP,...] -- COMMAND [ARG ...]"


class CapHeader(ctypes.Structure):
    _fields_ = (("version", ctypes.c_uint32), ("pid", ctypes.c_int))


class CapData(ctypes.Structure):
    _fields_ = (("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32))


def _ids(spec: str) -> tuple[int, int, list[int]]:
    """UID:GID[:GROUP,...], the ids numeric, a group by number or by its name in the image (ValueError
    otherwise)."""
    parts = spec.split(":")
    if len(parts) not in (2, 3):
        raise ValueError(spec)
    names = parts[2].split(",") if len(parts) == 3 and parts[2] else []
    try:
        groups = [int(name) if name.isdigit() else grp.getgrnam(name).gr_gid for name in names]
    except KeyError as error:
        raise ValueError(spec) from error
    return int(parts[0]), int(parts[1]), groups


def _become(libc: ctypes.CDLL, uid: int, gid: int, groups: list[int]) -> None:
    """The command's ids (in the child, before exec): from root, every id and no capability left (the
    kernel clears them when the last id leaves 0); from anyone else, only the ids it already has."""
    os.setsid()  # out of the warden's session and process group: what the tests set there is theirs alone
    if os.getuid() != 0:
        if (uid, gid) != (os.getuid(), os.getgid()):
            raise PermissionError(f"runs as {os.getuid()}:{os.getgid()}, cannot start a command as {uid}:{gid}")
        return
    if uid <= 0 or gid <= 0:  # the command is never root's, nor the warden's capabilities its
        raise PermissionError(f"will not start a command as {uid}:{gid} (root's or no id)")
    for capability in (CAP_KILL, CAP_SETGID, CAP_SETUID, CAP_SETPCAP):  # none left to any program it runs
        if libc.prctl(PR_CAPBSET_DROP, capability, 0, 0, 0) != 0:
            raise PermissionError(f"cannot drop capability {capability}: {os.strerror(ctypes.get_errno())}")
    os.setgroups(groups)
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    if os.getresuid() != (uid, uid, uid) or os.getresgid() != (gid, gid, gid):
        raise PermissionError(f"could not become {uid}:{gid}")


def _keep_kill_alone(libc: ctypes.CDLL) -> None:
    """From root: KILL alone, effective and permitted, so ending the container's processes is all it can do."""
    if os.getuid() != 0:
        return
    header = CapHeader(CAPABILITY_VERSION_3, 0)
    data = (CapData * 2)(CapData(1 << CAP_KILL, 1 << CAP_KILL, 0), CapData(0, 0, 0))
    if libc.capset(ctypes.byref(header), data) != 0:
        raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))


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
    try:
        if len(argv) < 6 or argv[4] != "--":
            raise ValueError
        seconds, kill_after, (uid, gid, groups), command = float(argv[1]), float(argv[2]), _ids(argv[3]), argv[5:]
    except ValueError:
        print(USAGE, file=sys.stderr)
        return 125
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        print(f"warden: cannot make itself non-dumpable: {os.strerror(ctypes.get_errno())}", file=sys.stderr)
        return 125
    waited = {signal.SIGCHLD, *PASSED_ON}
    before = signal.pthread_sigmask(signal.SIG_BLOCK, waited)
    child = os.fork()
    if child == 0:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)
        try:
            _become(libc, uid, gid, groups)
        except OSError as error:
            print(f"warden: {error.strerror or error}", file=sys.stderr)
            os._exit(125)
        try:
            os.execvp(command[0], command)
        except OSError as error:
            print(f"warden: {command[0]}: {error.strerror}", file=sys.stderr)
        os._exit(127)
    try:
        _keep_kill_alone(libc)
    except OSError as error:
        print(f"warden: cannot give up its capabilities: {error.strerror}", file=sys.stderr)
        _signal_all(signal.SIGKILL, child)
        return 125
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
                os._exit(TIMED_OUT)  # at once, no interpreter shutdown: its exit ends the namespace and what is left
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
