"""The lane's children (`torchyard.inimage.start.fork_server`): where two threads start and end children of the
fork server at once, each gets its own child's exit status, never multiprocessing's 255 for a status another
thread read first (python/cpython#130895); and the entry point starts the server only where the run's own
process runs the harness's tests."""

from __future__ import annotations

import multiprocessing
import os
import threading

import pytest

from torchyard.inimage.start.fork_server import serves_this_run, start_child, status_once_ended

pytestmark = pytest.mark.real_subprocess  # the fork server's children are the subject

CHILDREN = 40  # each thread's; without the lock, 18 to 49 of 200 such children came back 255 on 2 cores


def test_two_threads_starting_and_ending_children_each_get_the_real_status() -> None:
    context = multiprocessing.get_context("forkserver")
    wrong: list[int | None] = []
    reaped: list[int | None] = []

    def reap(code: int) -> None:
        for _ in range(CHILDREN):
            child = context.Process(target=os._exit, args=(code,))
            start_child(child)
            status = status_once_ended(child, None)
            reaped.append(status)
            if status != code:
                wrong.append(status)

    threads = [threading.Thread(target=reap, args=(code,)) for code in (1, 3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(reaped) == 2 * CHILDREN  # every child started and was reaped (a thread that raised did not)
    assert wrong == []


def test_a_child_that_has_not_ended_has_no_status_yet() -> None:
    context = multiprocessing.get_context("forkserver")
    started = context.Event()
    child = context.Process(target=started.wait)
    start_child(child)
    assert status_once_ended(child, 0.05) is None  # it waits for the event below: no speed decides this
    started.set()
    assert status_once_ended(child, None) == 0


def test_the_entry_point_starts_the_server_only_where_this_process_runs_the_harness() -> None:
    assert serves_this_run([]) and serves_this_run(["suites", "-p", "torchyard.inimage.plugin"])
    assert serves_this_run(["-m", "export or compile or harness"])
    assert not serves_this_run(["-m", "export or compile"]) and not serves_this_run(["-m", "not harness"])
    assert serves_this_run(["-m", "export", "-m", "harness"])  # pytest keeps the last
    for distributed in (["-n", "2"], ["-n2"], ["--numprocesses=2"], ["--numprocesses", "auto"]):  # a controller
        assert not serves_this_run(["-m", "harness", *distributed])
