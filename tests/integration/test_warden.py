"""The image's warden (`inimage/start/warden.py`), run here as any process (not a namespace's first, so it signals
its command alone): it passes the command's status on, ends it at the deadline with timeout(1)'s 124, reaps in
bounded passes, and refuses what it cannot read in one line. In a container: `test_stopped_run.py`."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

WARDEN = Path(__file__).parents[2] / "src" / "torchyard" / "inimage" / "start" / "warden.py"


def warden(*args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-IS", str(WARDEN), *args]
    return subprocess.run(command, check=False, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize(("command", "status"), [("exit 3", 3), ("exit 0", 0), ("kill -TERM $$", 128 + 15)])
def test_the_commands_status_is_the_wardens(command: str, status: int) -> None:
    assert warden("0", "0", "--", "/bin/sh", "-c", command).returncode == status


def test_a_command_past_its_deadline_ends_with_timeouts_status() -> None:
    stubborn = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)"
    assert warden("0.5", "1", "--", sys.executable, "-c", stubborn).returncode == 124  # TERM, then KILL


def test_a_command_it_cannot_start_or_arguments_it_cannot_read_are_one_line() -> None:
    missing = warden("0", "0", "--", "/no/such/command")
    assert missing.returncode == 127 and missing.stderr.strip() == "warden: /no/such/command: No such file or directory"
    usage = warden("5", "1", "sleep", "1")
    assert usage.returncode == 125 and len(usage.stderr.strip().splitlines()) == 1


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
