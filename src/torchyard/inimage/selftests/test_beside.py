"""Work beside the run (`beside.Beside`): the fork server, jobs and whole runs, their values and their failures."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from torchyard.inimage.selftests.beside import Beside, Job, WholeRun
from torchyard.inimage.selftests.conftest import _may_run_harness
from torchyard.inimage.start import proofs
from torchyard.inimage.start.fork_server import PRELOAD
from torchyard.inimage.start.proofs import has_proof

pytestmark = pytest.mark.harness


def test_the_fork_server_ends_without_tearing_down(tmp_path: Path) -> None:
    """Its exit handler runs before every handler registered before it (the server's imports'), and ends
    the process there: what those would have done is never done."""
    assert PRELOAD[-1] == "torchyard.inimage.start.server_last"
    torn_down = tmp_path / "torn-down"
    handler = f"import atexit; atexit.register(open, {str(torn_down)!r}, 'w')"
    script = f"{handler}\nimport torchyard.inimage.start.server_last"
    completed = subprocess.run([sys.executable, "-c", script], check=False, capture_output=True, text=True)
    assert completed.returncode == 0, completed.stderr
    assert not torn_down.exists()
    assert subprocess.run([sys.executable, "-c", handler], check=False).returncode == 0
    assert torn_down.exists()  # the check can fail: without the module, the handler runs


def test_the_fork_server_starts_at_configuration_where_the_harness_may_run(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def config(expression: str, workers: int | None = None, worker: bool = False, rerun: bool = False) -> Any:
        options = {"markexpr": expression, proofs.RERUN_OPTION: rerun}
        stub = SimpleNamespace(option=SimpleNamespace(numprocesses=workers), getoption=lambda name, *_: options[name])
        if worker:
            stub.workerinput = {"workerid": "gw0"}
        return stub

    # This very test is the harness's: the server started, unless a proof may leave the harness out.
    assert _may_run_harness(request.config) == (not has_proof(request.config))
    monkeypatch.delenv(proofs.PROOF, raising=False)
    assert _may_run_harness(config("")) and _may_run_harness(config("export or harness"))
    assert not _may_run_harness(config("export or compile"))
    assert not _may_run_harness(config("not harness")) and _may_run_harness(config("not export"))
    assert not _may_run_harness(config("harness", workers=2))  # an xdist controller: its workers run them
    assert _may_run_harness(config("harness", workers=2, worker=True))
    monkeypatch.setenv(proofs.PROOF, str(tmp_path / "proof.json"))
    assert _may_run_harness(config(""))  # named, but not there
    (tmp_path / "proof.json").write_text("{}")
    assert not _may_run_harness(config("")) and _may_run_harness(config("", rerun=True))


def doubled(workdir: Path, value: int) -> tuple[int, bool]:
    return value * 2, workdir.is_dir()


def raises(workdir: Path) -> None:
    print("said before failing")
    raise ValueError("planted in the child")


def dies(workdir: Path) -> None:
    os._exit(3)


ENVIRONMENT_SEEN = """
import os

def test_environment():
    assert os.environ.get("TORCHYARD_PLANTED") == "at collection"
    assert "TORCHYARD_UNSET" not in os.environ
    assert 1 == 2
"""


def test_whole_runs_beside_the_run_see_the_environment_of_collection(monkeypatch: pytest.MonkeyPatch) -> None:
    """A whole run started beside the run gets the environment the run had when `Beside` was made (at
    collection), not that of whichever test is running when it starts; and its failures are its own."""
    monkeypatch.setenv("TORCHYARD_PLANTED", "at collection")
    monkeypatch.setenv("TORCHYARD_UNSET", "seen")
    run = WholeRun((("test_seen.py", ENVIRONMENT_SEEN),), ("-p", "no:cacheprovider"), unset=("TORCHYARD_UNSET",))
    for forked in (True, False):
        beside = Beside([run, Job(doubled, (2,))], forked=forked)
        try:
            monkeypatch.setenv("TORCHYARD_PLANTED", "by a later test")
            assert beside.result(1) == (4, True)
            result = beside.result(0)
            assert result.ret == pytest.ExitCode.TESTS_FAILED
            result.stdout.fnmatch_lines(["*assert 1 == 2*"])  # failed where it was meant to, not before
        finally:
            beside.stop()
            monkeypatch.setenv("TORCHYARD_PLANTED", "at collection")


def test_work_beside_the_run_returns_its_values_and_its_failures_fail() -> None:
    """The tests that lower afresh trust `Beside`: a job that raises, or a child that dies, must fail the
    test that asks for it, never pass it or hang it."""
    beside = Beside([Job(doubled, (21,)), Job(raises), Job(doubled, (1,)), Job(dies), Job(doubled, (5,))])
    try:
        assert beside.result(2) == (2, True)  # in any order, each job in a folder of its own
        assert beside.result(0) == (42, True)
        with pytest.raises(pytest.fail.Exception, match=r"(?s)ValueError: planted in the child.*said before failing"):
            beside.result(1)
        for job in (3, 4):  # the child is gone: the job that killed it, and every job after it
            with pytest.raises(pytest.fail.Exception, match=rf"ended \(status 3\) before job {job}"):
                beside.result(job)
    finally:
        beside.stop()
    here = Beside([Job(doubled, (21,)), Job(raises)], forked=False)  # as in an xdist worker: done when asked
    try:
        assert here.result(0) == (42, True)
        with pytest.raises(pytest.fail.Exception, match="ValueError: planted in the child"):
            here.result(1)
    finally:
        here.stop()


def frozen(workdir: Path) -> int:
    return gc.get_freeze_count()


@pytest.mark.beside.with_args(frozen)
def test_the_fork_servers_children_start_with_its_imports_frozen(beside: int) -> None:
    """torch's objects, imported once by the server, are out of the collector's sight in every child it forks
    (`server_last`): a full collection in a whole run would walk them all again."""
