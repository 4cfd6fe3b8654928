"""The image's warden (`inimage/start/warden.py`), run here as any process (not a namespace's first, so it signals
its command alone): it passes the command's status on, ends it at the deadline with timeout(1)'s 124, reaps in
bounded passes, runs its command as another user with no capability (keeping KILL alone), and refuses what it
cannot read in one line. In a container: `test_stopped_run.py`."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

WARDEN = Path(__file__).parents[2] / "src" / "torchyard" / "inimage" / "start" / "warden.py"


NOBODY = "65534:65534"
# Its command's ids: from root (as in every container, and in CI) another user's, never root's; else its own
AS = NOBODY if os.getuid() == 0 else f"{os.getuid()}:{os.getgid()}"
PYTHON = "/usr/bin/python3"  # the system's, which any user may run
# Run as the other user: what it holds, and what it may do to the warden (its parent).
AS_NOBODY = """
import json, os, sys
def status(pid):
    lines = open(f"/proc/{pid}/status").read().splitlines()
    return dict(line.split(":\t", 1) for line in lines if ":\t" in line)
own, parent = status("self"), status(os.getppid())
tried = {}
for name, attempt in (
    ("sched", lambda: os.sched_setscheduler(os.getppid(), os.SCHED_IDLE, os.sched_param(0))),
    ("nice", lambda: os.setpriority(os.PRIO_PROCESS, os.getppid(), 19)),
    ("affinity", lambda: os.sched_setaffinity(os.getppid(), {0})),
    ("signal", lambda: os.kill(os.getppid(), 0)),
):
    try:
        attempt()
        tried[name] = "done"
    except PermissionError:
        tried[name] = "refused"
print(json.dumps({
    "ids": [os.getuid(), os.getgid(), os.getgroups()], "caps": own["CapEff"].strip(),
    "permitted": own["CapPrm"].strip(), "bounding": own["CapBnd"].strip(), "warden": parent["CapEff"].strip(),
    "tried": tried, "own_session": os.getsid(0) == os.getpid() != os.getsid(os.getppid()),
}))
"""


def warden(*args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-IS", str(WARDEN), *args]
    return subprocess.run(command, check=False, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize(("command", "status"), [("exit 3", 3), ("exit 0", 0), ("kill -TERM $$", 128 + 15)])
def test_the_commands_status_is_the_wardens(command: str, status: int) -> None:
    assert warden("0", "0", AS, "--", "/bin/sh", "-c", command).returncode == status


def test_a_command_past_its_deadline_ends_with_timeouts_status() -> None:
    stubborn = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)"
    assert warden("0.5", "1", AS, "--", PYTHON, "-c", stubborn).returncode == 124  # TERM, then KILL


def test_a_command_it_cannot_start_or_arguments_it_cannot_read_are_one_line() -> None:
    missing = warden("0", "0", AS, "--", "/no/such/command")
    assert missing.returncode == 127 and missing.stderr.strip() == "warden: /no/such/command: No such file or directory"
    for unreadable in (("5", "1", "sleep", "1"), ("5", "1", "--", "sleep", "1"), ("5", "1", "x:1", "--", "true"),
                       ("5", "1", "1:1:no-such-group", "--", "true")):  # fmt: skip
        usage = warden(*unreadable)
        assert usage.returncode == 125 and usage.stderr.strip().splitlines() == [
            "warden: usage: warden SECONDS KILL_AFTER UID:GID[:GROUP,...] -- COMMAND [ARG ...]"
        ]


@pytest.mark.skipif(os.getuid() != 0, reason="the warden starts as root in every container; CI runs these as root")
def test_from_root_the_command_runs_as_the_user_with_nothing_over_the_warden_which_keeps_kill_alone() -> None:
    """The command cannot reschedule, signal or trace the warden (a same-user test starved it past its
    deadline): it is another user's, with no capability; the warden holds KILL (bit 5) and nothing else."""
    ran = warden("0", "0", f"{NOBODY}:65534,20", "--", PYTHON, "-IS", "-c", AS_NOBODY)
    assert ran.returncode == 0, ran.stderr
    seen = json.loads(ran.stdout)
    assert seen["ids"] == [65534, 65534, [20, 65534]]
    assert int(seen["caps"], 16) == 0 and int(seen["permitted"], 16) == 0
    # its own four out of the bounding set too (a container's holds no other: `test_run.py` finds it empty)
    assert int(seen["bounding"], 16) & 0x1E0 == 0
    assert int(seen["warden"], 16) == 1 << 5
    assert seen["own_session"]  # nor its session's or process group's: the command leads its own
    assert seen["tried"] == {"sched": "refused", "nice": "refused", "affinity": "refused", "signal": "refused"}


@pytest.mark.skipif(os.getuid() != 0, reason="the warden starts as root in every container; CI runs these as root")
@pytest.mark.parametrize("ids", ["0:0", "0:65534", "65534:0", "-1:-1"])
def test_from_root_it_never_starts_its_command_as_root(ids: str) -> None:
    """The command would hold the warden's capabilities (and root's files): torchyard never asks for it
    (`seal.run_user`), and the warden refuses it in one line."""
    ran = warden("0", "0", ids, "--", "/usr/bin/id", "-u")
    assert ran.returncode == 125 and ran.stdout == ""
    assert len(ran.stderr.strip().splitlines()) == 1 and "will not start a command as" in ran.stderr


def test_a_warden_not_started_as_root_runs_its_command_as_itself_and_as_no_one_else() -> None:
    """By hand, on a host: no capability to give another user its command, so it refuses in one line."""
    command = ["/usr/bin/python3", "-IS", str(WARDEN), "0", "0"]
    same = subprocess.run([*command, NOBODY, "--", "/usr/bin/id", "-u"], check=False, capture_output=True,
                          text=True, timeout=120, user=65534, group=65534, extra_groups=[])  # fmt: skip
    assert same.returncode == 0 and same.stdout.strip() == "65534", same.stderr
    other = subprocess.run([*command, "1000:1000", "--", "/usr/bin/id", "-u"], check=False, capture_output=True,
                           text=True, timeout=120, user=65534, group=65534, extra_groups=[])  # fmt: skip
    assert other.returncode == 125 and other.stdout == ""
    assert other.stderr.strip() == "warden: runs as 65534:65534, cannot start a command as 1000:1000"


def test_reaping_is_done_in_bounded_passes(monkeypatch: pytest.MonkeyPatch) -> None:
    """A flood of exiting processes never keeps the warden from its deadline: each pass reaps at most a few,
    then says more are left."""
    spec = importlib.util.spec_from_file_location("warden", WARDEN)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    children = [os.fork() or os._exit(0) for _ in range(5)]  # the parent gets pids; each child exits at once
    for pid in children:
        os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)  # exited, not yet reaped
    ended, drained = module._reap(children[-1], most=2)
    assert ended is None or ended == 0
    assert not drained
    while not drained:
        _, drained = module._reap(children[-1], most=2)
