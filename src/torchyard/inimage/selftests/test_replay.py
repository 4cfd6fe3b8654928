"""Result replay can fail safely: any change to what decides the verdicts reruns, a replay says so, and a
run that could not start is never kept."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from torchyard import contract
from torchyard.inimage.selftests.beside import whole_run_environment
from torchyard.inimage.selftests.whole_runs import OWN_SETTINGS
from torchyard.inimage.start import replay

pytestmark = pytest.mark.harness

ENV = {
    contract.ACCELERATOR: "cpu",
    contract.PRECISION: "fp32",
    contract.SUITES: "parity",
    contract.IMAGE_ID: "sha256:a",
}
DEVICE = {"type": "cpu", "processor": "some cpu"}


def test_the_fingerprint_changes_with_everything_that_decides_verdicts(tmp_path: Path) -> None:
    tests = tmp_path / "test_project.py"
    tests.write_text("def test_a():\n    pass\n")
    argv = [str(tests), "-m", "parity"]
    base = replay.fingerprint(argv, ENV, DEVICE)
    assert replay.fingerprint(argv, dict(ENV), dict(DEVICE)) == base
    changed = [
        replay.fingerprint(argv, {**ENV, contract.IMAGE_ID: "sha256:b"}, DEVICE),  # another image
        replay.fingerprint(argv, {**ENV, contract.TOLERANCES: '{"float32.export": {"max-rel-l2": 1}}'}, DEVICE),
        replay.fingerprint(argv, {**ENV, contract.PRECISION: "bf16"}, DEVICE),
        replay.fingerprint([*argv, "-k", "mlp"], ENV, DEVICE),
        replay.fingerprint(argv, ENV, {**DEVICE, "processor": "another cpu"}),
    ]
    tests.write_text("def test_a():\n    assert False\n")
    changed.append(replay.fingerprint(argv, ENV, DEVICE))  # the project's test changed
    assert base not in changed and len(set(changed)) == len(changed)


def test_a_file_an_option_names_decides_the_fingerprint(tmp_path: Path) -> None:
    """An ops run compared with a project's expectations file reruns once that file changes, however named."""
    expected = tmp_path / "expectations.toml"
    expected.write_text("[outcomes]\n")
    for argv in ([f"--torchyard-ops-expectations={expected}"], ["--torchyard-ops-expectations", str(expected)]):
        before = replay.fingerprint(argv, ENV, DEVICE)
        expected.write_text(expected.read_text() + "# edited\n")
        assert replay.fingerprint(argv, ENV, DEVICE) != before


def test_a_replay_hands_back_the_reports_marked_with_their_time(tmp_path: Path) -> None:
    reports, store = tmp_path / "reports", tmp_path / "store"
    reports.mkdir()
    (reports / "parity.json").write_text(json.dumps({"results": []}))
    (reports / "parity.md").write_text("### parity\n")
    (reports / "junit.xml").write_text("<testsuites/>")
    started = dt.datetime(2026, 11, 30, 7, 0, tzinfo=dt.UTC)
    replay.save(store, "k" * 64, reports, 1, started)
    assert replay.replay(store, "j" * 64, tmp_path / "other") is None  # another fingerprint: a real run
    again = tmp_path / "again"
    assert replay.replay(store, "k" * 64, again) == 1  # the stored status, failures included
    assert json.loads((again / "parity.json").read_text())["replay"] == {
        "replayed": True,
        "original-run": started.isoformat(),
        "fingerprint": "k" * 64,
    }
    assert (again / "parity.md").read_text().startswith("**Replayed**: nothing ran; these are the verdicts of the run")
    assert (again / "junit.xml").read_text() == "<testsuites/>"


def test_an_ops_sweeps_reports_are_handed_back_marked_too(tmp_path: Path) -> None:
    """A sweep that changed nothing replays in seconds: its table comes back with it, saying so."""
    reports, store = tmp_path / "reports", tmp_path / "store"
    reports.mkdir()
    (reports / "parity.json").write_text(json.dumps({"results": []}))
    (reports / "ops.json").write_text(json.dumps({"outcomes": [{"operator": "abs"}]}))
    (reports / "ops.md").write_text("### ops\n")
    replay.save(store, "k" * 64, reports, 0, dt.datetime(2026, 12, 4, tzinfo=dt.UTC))
    again = tmp_path / "again"
    assert replay.replay(store, "k" * 64, again) == 0
    ops = json.loads((again / "ops.json").read_text())
    assert ops["outcomes"] == [{"operator": "abs"}] and ops["replay"]["replayed"] is True
    assert (again / "ops.md").read_text().startswith("**Replayed**: nothing ran")


def test_a_run_that_could_not_start_is_never_kept(tmp_path: Path) -> None:
    reports = tmp_path / "reports"
    reports.mkdir()
    replay.save(tmp_path / "store", "k" * 64, reports, contract.PROBE_FAILED, dt.datetime.now(dt.UTC))
    assert replay.replay(tmp_path / "store", "k" * 64, tmp_path / "again") is None


@pytest.mark.parametrize("status", [0, 1, 2])
def test_a_run_that_ran_is_kept_whatever_its_verdict(tmp_path: Path, status: int) -> None:
    """Passed (0), failed (1) and interrupted (2) runs ran their tests: their verdicts are kept, in a store
    made where none was, and a later run of the same fingerprint replaces them."""
    reports, store = tmp_path / "reports", tmp_path / "cache" / "replay" / "store"
    reports.mkdir()
    replay.save(store, "k" * 64, reports, 1 - status % 2, dt.datetime.now(dt.UTC))
    replay.save(store, "k" * 64, reports, status, dt.datetime.now(dt.UTC))
    assert replay.replay(store, "k" * 64, tmp_path / "again") == status


@pytest.mark.parametrize("status", [contract.PROBE_FAILED, 4, 5, -9])
def test_a_run_that_did_not_test_is_never_kept(tmp_path: Path, status: int) -> None:
    """From the probe's status up (3, and pytest's usage error 4 and no tests 5), and a signal (negative),
    the run tested nothing: nothing is kept."""
    reports = tmp_path / "reports"
    reports.mkdir()
    replay.save(tmp_path / "store", "k" * 64, reports, status, dt.datetime.now(dt.UTC))
    assert replay.replay(tmp_path / "store", "k" * 64, tmp_path / "again") is None


COUNTED = """
import os
from pathlib import Path


def test_counted():
    with Path(os.environ["COUNTED_RUNS"]).open("a") as runs:
        runs.write("ran\\n")
"""


def plain_run_then_reuse(workdir: Path) -> list[tuple[int, int, bool]]:
    """The in-image entry point twice over the same inputs: a plain run, then one with --reuse-results. After
    each: its status, how often the test has run, and whether it said it replayed."""
    tests, runs = workdir / "tests", workdir / "runs"
    tests.mkdir()
    (tests / "test_counted.py").write_text(COUNTED)
    # The run's own settings left out, as a whole run's are (no self-test reads them: `proofs`).
    dropped = {*OWN_SETTINGS, contract.REUSE_RESULTS}
    env = {name: value for name, value in whole_run_environment(os.environ).items() if name not in dropped}
    env |= {
        contract.ACCELERATOR: "cpu",  # no workers, whatever devices the run has
        contract.REPORT_DIR: str(workdir / "reports"),
        contract.INDUCTOR_CACHE: str(workdir / "cache"),  # the replay store is under it: these runs' own
        "COUNTED_RUNS": str(runs),
        # The torchyard this run imports, wherever the runs start (a relative PYTHONPATH would not follow).
        "PYTHONPATH": os.pathsep.join([str(Path(contract.__file__).resolve().parents[1]), env.get("PYTHONPATH", "")]),
    }
    # Not the harness: the entry point starts no fork server for a run that cannot run the harness's tests.
    argv = [str(tests / "test_counted.py"), "-p", "no:cacheprovider", "-m", "not harness"]
    argv.append(f"--junitxml={workdir / 'reports' / contract.JUNIT}")
    seen = []
    for reuse in ("0", "1"):
        command = [sys.executable, "-m", "torchyard.inimage", *argv]
        environment = {**env, contract.REUSE_RESULTS: reuse}
        completed = subprocess.run(command, env=environment, cwd=workdir, capture_output=True, text=True, check=False)
        ran = len(runs.read_text().splitlines()) if runs.exists() else 0
        seen.append((completed.returncode, ran, "torchyard: replayed the verdicts" in completed.stdout))
    return seen


@pytest.mark.beside.with_args(plain_run_then_reuse)
def test_the_first_reuse_after_a_plain_run_of_the_same_inputs_replays_it(beside: list[tuple[int, int, bool]]) -> None:
    """A plain run keeps its verdicts as a --reuse-results run does (issue 45: the first --reuse-results run
    after a plain one ran everything again, and only the next replayed)."""
    plain, reused = beside
    assert plain == (0, 1, False)
    assert reused == (0, 1, True)


def test_a_store_that_cannot_be_written_leaves_the_run_as_it_ended(tmp_path: Path) -> None:
    """Every run keeps its verdicts, asked to or not: where it cannot, it says so and nothing else changes."""
    reports, blocked = tmp_path / "reports", tmp_path / "blocked"
    reports.mkdir()
    blocked.write_text("a file where the store's folder would be")
    replay.save(blocked / "store", "k" * 64, reports, 0, dt.datetime.now(dt.UTC))
    assert replay.replay(blocked / "store", "k" * 64, tmp_path / "again") is None
