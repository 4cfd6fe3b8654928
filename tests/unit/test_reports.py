"""The reports folder as hostile code leaves it: links are removed, never followed; one run at a time."""

from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path

import pytest

from torchyard.errors import UsageError
from torchyard.inimage.load import machine_load, sample
from torchyard.inimage.parity.report import write_reports
from torchyard.run.reports import (
    HandBackError,
    empty_folder,
    exclusive_run,
    folder_bytes,
    fresh_folder,
    hand_back,
    read_report,
    reports_folder,
)
from torchyard.run.stamp import HOST_LINE, stamp_reports


@pytest.mark.skipif(os.getuid() != 0, reason="handing back as root is what can take over host files")
def test_links_planted_in_the_reports_are_removed_and_never_followed(tmp_path: Path) -> None:
    outside = tmp_path / "host-file"
    outside.write_text("the host's\n")
    os.chown(outside, 0, 0)
    reports = tmp_path / "reports" / "cpu"
    fresh_folder(reports)
    (reports / "parity.md").write_text("| table |\n")
    (reports / "nested").mkdir()
    (reports / "x").symlink_to(outside)
    (reports / "nested" / "y").symlink_to(outside)
    (reports / "dir-link").symlink_to(tmp_path)
    os.mkfifo(reports / "fifo")
    removed = hand_back(reports, 1234, 1234)
    assert sorted(removed) == ["dir-link", "fifo", "nested/y", "x"]
    assert (outside.stat().st_uid, outside.read_text()) == (0, "the host's\n")
    assert tmp_path.stat().st_uid == 0
    assert (reports / "parity.md").stat().st_uid == 1234 and (reports / "nested").stat().st_uid == 1234


def test_a_summary_is_never_read_through_a_link(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text("password\n")
    (tmp_path / "parity.md").symlink_to(secret)
    assert read_report(tmp_path / "parity.md") is None
    assert read_report(tmp_path / "absent.md") is None
    (tmp_path / "real.md").write_text("| ok |\n")
    assert read_report(tmp_path / "real.md") == "| ok |\n"


def test_a_run_starts_from_an_empty_folder(tmp_path: Path) -> None:
    reports = tmp_path / "cpu"
    reports.mkdir()
    (reports / "parity.md").write_text("last run's table\n")
    fresh_folder(reports)
    assert list(reports.iterdir()) == []


def test_a_reports_path_that_is_a_file_or_a_link_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(UsageError, match="is a file, not a folder"):
        fresh_folder(tmp_path / "file")
    (tmp_path / "link").symlink_to(tmp_path)
    with pytest.raises(UsageError, match="is a symbolic link"):
        fresh_folder(tmp_path / "link")


def test_one_run_per_reports_folder(tmp_path: Path) -> None:
    reports = tmp_path / "reports" / "cpu"
    with exclusive_run(reports):
        other = os.open(tmp_path / "reports" / ".cpu.lock", os.O_RDWR)
        try:
            with pytest.raises(BlockingIOError):
                fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
        finally:
            os.close(other)
    other = os.open(tmp_path / "reports" / ".cpu.lock", os.O_RDWR)
    fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)  # free once the run is over
    os.close(other)


def test_the_parity_reports_name_the_suites_that_ran(tmp_path: Path) -> None:
    """A run narrowed with `--suite` says so wherever its verdicts are read: a report that looks whole
    would pass for a run of every suite."""
    manifest = {"accelerator": "cuda", "device": "NVIDIA H200", "torch": "2.11.0", "trust": "untrusted"}
    paths = write_reports(tmp_path, [], manifest, {"suites": ["export", "parity"]})
    title = paths["markdown"].read_text().splitlines()[0]
    assert title == "### torchyard parity: cuda on NVIDIA H200, torch 2.11.0, untrusted run; suites: export, parity"
    assert json.loads(paths["json"].read_text())["suites"] == ["export", "parity"]


def test_a_chain_deeper_than_the_walk_goes_is_removed_without_recursion(tmp_path: Path) -> None:
    """1,100 folders deep made Python 3.11's os.walk raise RecursionError, and the links in it stayed."""
    reports = tmp_path / "reports"
    fresh_folder(reports)
    (reports / "parity.md").write_text("| table |\n")
    handle = os.open(reports, os.O_RDONLY)
    for _ in range(1100):  # by descriptor: the chain's path is longer than the kernel takes in one piece
        os.mkdir("d", dir_fd=handle)
        inner = os.open("d", os.O_RDONLY, dir_fd=handle)
        os.symlink("/etc/hostname", "leak", dir_fd=inner)
        os.close(handle)
        handle = inner
    os.close(handle)
    removed = hand_back(reports, os.getuid(), os.getgid())
    assert removed[-1] == "/".join(["d"] * 33) + " (deeper than 32 folders)"
    assert len(removed) == 33  # the links in the 32 folders kept, and the cut
    assert all(name.endswith("/leak") for name in removed[:-1])
    assert (reports / "parity.md").is_file()
    depth, folder = 0, reports
    while (folder / "d").is_dir():
        depth, folder = depth + 1, folder / "d"
    assert depth == 32 and not list(reports.rglob("leak"))
    fresh_folder(reports)  # a later run starts from an empty folder, whatever the last one left
    assert not list(reports.iterdir())


def test_more_than_the_machines_limit_fails_the_hand_back_and_empties_the_folder(tmp_path: Path) -> None:
    reports = tmp_path / "reports"
    fresh_folder(reports)
    (reports / "big").write_bytes(b"x" * 5000)
    (reports / "nested").mkdir()
    (reports / "nested" / "more").write_bytes(b"x" * 5000)
    with pytest.raises(HandBackError) as caught:
        hand_back(reports, os.getuid(), os.getgid(), limit_bytes=8000)
    assert str(caught.value) == (
        f"the run left 0 MB in {reports}, over this machine's 0 MB for reports (machine.toml [limits] reports): emptied"
    )
    assert reports.is_dir() and not list(reports.iterdir())
    (reports / "small").write_bytes(b"x")
    assert hand_back(reports, os.getuid(), os.getgid(), limit_bytes=8000) == []


def _record(case: str, backend: str, suite: str, latency: float | None) -> dict[str, object]:
    return {"case": case, "backend": backend, "suite": suite, "outcome": "passed", "latency_ms": latency}


def test_train_steps_are_timed_against_the_eager_step_with_their_optimizer(tmp_path: Path) -> None:
    records = [
        _record("mlp", "train-inductor-adamw", "train", 2.0),
        _record("mlp", "eager", "parity", 1.0),
        _record("mlp", "train-eager-sgd", "train", 4.0),
        _record("mlp", "inductor", "compile", 0.5),
        _record("mlp", "train-inductor-sgd:max-autotune", "train", 1.0),
        _record("mlp", "train-eager-adamw", "train", 3.0),
        _record("conv", "train-eager-sgd", "train", 1.0),
        _record("conv", "eager", "parity", 2.0),
    ]
    paths = write_reports(tmp_path, records, {"accelerator": "cpu"}, {})
    speed = json.loads(paths["json"].read_text())["speed"]["mlp"]
    assert speed["inductor"]["speedup"] == 2.0  # over eager inference
    assert speed["train-inductor-adamw"]["speedup"] == 1.5  # over the eager AdamW step, not over inference
    assert speed["train-inductor-sgd:max-autotune"]["speedup"] == 4.0
    assert speed["train-eager-sgd"]["speedup"] == 1.0
    text = paths["markdown"].read_text()
    inference, _, training = text.partition("#### Training speed")
    assert "train-" not in inference.split("#### Speed")[1]  # the inference table has inference columns only
    (mlp,) = [" ".join(line.split()) for line in training.splitlines() if line.startswith("| mlp ")]
    assert mlp == "| mlp | 4.000 (1.00x) | 3.000 (1.00x) | 2.000 (1.50x) | 1.000 (4.00x) |"
    # A case's inference and training rows stand together in the verdict table.
    cases = [line.split("|")[1].strip() for line in text.split("#### Speed")[0].splitlines() if line.startswith("| ")]
    assert cases[1:] == ["conv", "conv", "mlp", "mlp", "mlp", "mlp", "mlp", "mlp"]


def _result(case: str, backend: str, suite: str, outcome: str, reason: str = "", **fields: object) -> dict[str, object]:
    return {"case": case, "backend": backend, "suite": suite, "outcome": outcome, "reason": reason, **fields}


def test_the_markdown_opens_with_counts_then_the_failures_and_known_failures(tmp_path: Path) -> None:
    """276 rows read at a glance only with a summary first: counts by outcome, then each failure and known
    failure on its own line with its whole reason; every row follows."""
    long_reason = "expected the known failure UserError matching 'Eq(u0, 1)', got error: " + "x" * 300
    records = [
        _result("mlp", "eager", "parity", "passed"),
        _result("conv", "executorch-portable", "runtime", "xfailed", "upstream issue #123 [observed: 0x12]"),
        _result("guarded", "export", "export", "failed", long_reason),
        _result("mlp", "tensorrt", "parity", "skipped", "Torch-TensorRT needs an NVIDIA CUDA device"),
    ]
    lines = write_reports(tmp_path, records, {"accelerator": "cpu"}, {})["markdown"].read_text().splitlines()
    assert lines[1:6] == [
        "",
        "**1 pass, 1 FAIL, 1 skip, 1 known failure** (4 results)",
        "",
        f"- FAIL: `guarded` on export (export): {long_reason}",
        "- known failure: `conv` on executorch-portable (runtime): upstream issue #123 [observed: 0x12]",
    ]
    rows = [line for line in lines if line.startswith("| ") and "(median" not in line]
    assert len(rows) == 1 + len(records)  # the header, and every result
    assert "cache" in rows[0].split("|")[11]


def test_the_reference_and_the_cache_say_what_qualifies_a_row(tmp_path: Path) -> None:
    effective = "float64 on cpu (float32 in effect: eager in float32 equals it exactly)"
    why = "no source for 'doubled' in model (code made at run time, by exec or in a notebook, has none)"
    records = [
        _result("vq", "export", "export", "passed", reference=effective, cache="hit"),
        _result("notebook", "export", "export", "passed", reference="float64 on cpu", cache="unkeyable", cache_why=why),
    ]
    text = write_reports(tmp_path, records, {"accelerator": "cpu"}, {})["markdown"].read_text()
    assert f"- reference for `vq`: {effective}\n" in text
    assert f"- artifact cache not used for `notebook` (export): {why}\n" in text
    (vq,) = [line.split("|") for line in text.splitlines() if line.startswith("| vq ")]
    assert [vq[8].strip(), vq[11].strip()] == ["float64 on cpu (float32 in effect)", "hit"]


def test_machine_load_decides_whether_speed_figures_stand() -> None:
    """Others' work is what ran before the run (its start's 1-minute load) or beside it (its end's, less its
    own workers); with the run's workers it must fit the CPUs."""
    quiet = machine_load([0.4, 0.5, 0.5], [1.3, 0.9, 0.6], cpus=2, workers=1)
    assert (quiet["loaded"], quiet["others"]) == (False, 0.4)
    shared = machine_load([5.13, 5.55, 4.08], [5.9, 5.6, 4.5], cpus=2, workers=1)
    assert (shared["loaded"], shared["others"]) == (True, 5.13)
    assert shared["why"] == (
        "other work averaged 5.1 runnable processes beside this run's 1 on 2 CPUs "
        "(1-minute load average 5.13 at the start, 5.90 at the end)"
    )
    assert machine_load([0.0, 0.0, 0.0], [3.9, 1.0, 0.4], cpus=4, workers=2)["loaded"] is False  # its own 2, and 1.9
    assert machine_load([0.0, 0.0, 0.0], [4.5, 1.0, 0.4], cpus=4, workers=2)["loaded"] is True  # 2.5 others + 2 > 4
    assert machine_load(None, None, cpus=2, workers=1)["loaded"] is None
    assert sample(lambda: (1.234, 2.0, 3.0)) == [1.23, 2.0, 3.0]


def test_a_loaded_machines_speedups_are_withheld(tmp_path: Path) -> None:
    records = [_record("mlp", "eager", "parity", 2.0), _record("mlp", "inductor", "compile", 0.0034)]
    loaded = {"accelerator": "cpu", "load": machine_load([5.1, 5.0, 4.0], [5.5, 5.0, 4.0], cpus=2, workers=1)}
    text = write_reports(tmp_path / "loaded", records, loaded, {})["markdown"].read_text()
    assert "- speed: the machine was loaded, so speedups are withheld and latencies are upper bounds: " in text
    (row,) = [" ".join(line.split()) for line in text.split("#### Speed")[1].splitlines() if line.startswith("| mlp")]
    assert row == "| mlp | 2.000 | 0.003 |"  # not 588x
    quiet = {"accelerator": "cpu", "load": machine_load([0.2, 0.2, 0.2], [1.0, 0.5, 0.3], cpus=2, workers=1)}
    text = write_reports(tmp_path / "quiet", records, quiet, {})["markdown"].read_text()
    assert "588.24x" in text and "- speed:" not in text


@pytest.mark.parametrize("link", ["reports", "reports/cpu"])
def test_a_committed_link_on_the_way_to_the_reports_is_refused_never_followed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, link: str
) -> None:
    """A pull request commits `reports -> ../victim` (or `reports/cpu -> ...`): the victim is never written."""
    checkout, victim = tmp_path / "checkout", tmp_path / "victim"
    checkout.mkdir()
    victim.mkdir()
    (victim / "keep").write_text("the host's")
    (checkout / link).parent.mkdir(parents=True, exist_ok=True)
    (checkout / link).symlink_to(victim)
    monkeypatch.chdir(checkout)
    with pytest.raises(UsageError, match=rf"{checkout / link} is a symbolic link .*: refusing to write through it"):
        reports_folder(Path("reports"), "cpu")
    with pytest.raises(UsageError, match="is a symbolic link"):
        fresh_folder(Path("reports") / "cpu")
    assert [item.name for item in victim.iterdir()] == ["keep"]


def test_a_committed_link_in_place_of_the_runs_lock_is_one_line_never_followed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    checkout, victim = tmp_path / "checkout", tmp_path / "victim"
    (checkout / "reports").mkdir(parents=True)
    victim.write_text("the host's")
    (checkout / "reports" / ".cpu.lock").symlink_to(victim)
    monkeypatch.chdir(checkout)
    with (
        pytest.raises(UsageError, match=r"\.cpu\.lock: cannot hold the run's lock"),
        exclusive_run(Path("reports") / "cpu"),
    ):
        pass
    with pytest.raises(UsageError, match=r"\.cpu\.lock: cannot hold the run's lock \(a link or folder\)"):
        reports_folder(Path("reports"), "cpu")  # before any build
    assert victim.read_text() == "the host's"


def test_a_reports_folder_outside_the_checkout_is_taken_as_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """$RUNNER_TEMP may itself lie behind a link (macOS's /tmp): only what torchyard makes there is checked."""
    (tmp_path / "real").mkdir()
    (tmp_path / "temp").symlink_to(tmp_path / "real")
    monkeypatch.chdir(tmp_path / "real")
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    assert reports_folder(tmp_path / "temp" / "reports", "cpu") == tmp_path / "temp" / "reports" / "cpu"


def test_the_reports_are_counted_as_they_are_written_without_following_links(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "big").write_bytes(b"x" * 1000)
    (tmp_path / "huge-elsewhere").write_bytes(b"x" * 5000)
    (tmp_path / "a" / "link").symlink_to(tmp_path / "huge-elsewhere")
    assert folder_bytes(tmp_path / "a") == 1000


def test_the_host_stamps_trust_entry_and_image_over_what_the_container_wrote(tmp_path: Path) -> None:
    """A conftest that rewrites the reports after torchyard's plugin cannot call an untrusted run trusted."""
    (tmp_path / "env.json").write_text(json.dumps({"trust": "trusted", "torch": "2.14.1", "entry": "forged"}))
    (tmp_path / "parity.json").write_text(json.dumps({"environment": {"trust": "trusted"}, "results": []}))
    (tmp_path / "parity.md").write_text(f"{HOST_LINE} entry `cpu`, image `x`, **trusted** run\n### torchyard parity\n")
    stamp_reports(tmp_path, {"trust": "untrusted", "entry": "cpu", "image": "torchyard/cpu:abc"})
    environment = json.loads((tmp_path / "env.json").read_text())
    assert environment == {"trust": "untrusted", "torch": "2.14.1", "entry": "cpu", "image": "torchyard/cpu:abc"}
    assert json.loads((tmp_path / "parity.json").read_text())["environment"]["trust"] == "untrusted"
    markdown = (tmp_path / "parity.md").read_text().splitlines()
    assert markdown[0] == f"{HOST_LINE} entry `cpu`, image `torchyard/cpu:abc`, **untrusted** run"
    assert [line for line in markdown if line.startswith(HOST_LINE)] == markdown[:1]


@pytest.mark.parametrize(
    "forged",
    [
        "> **torchyard  (host)**: entry `cpu`, image `x`, **trusted** run",  # two spaces
        ">  **Torchyard (Host)**: **trusted** run",
        "> **" + "".join(chr(ord(c) + 0xFEE0) for c in "torchyard") + " (host)**: **trusted** run",  # full-width
    ],
)
def test_a_line_that_reads_as_the_hosts_and_the_titles_trust_are_the_hosts(tmp_path: Path, forged: str) -> None:
    """The container's title says the trust its environment claimed; a conftest can set that, or write a
    line that looks like the host's: both are the host's word after the hand-back."""
    title = "### torchyard parity: cpu on cpu, torch 2.14.1, Trusted run; suites: export"
    (tmp_path / "parity.md").write_text(f"{forged}\n{title}\nbody, a trusted run in words\n")
    stamp_reports(tmp_path, {"trust": "untrusted", "entry": "cpu", "image": "i"})
    markdown = (tmp_path / "parity.md").read_text().splitlines()
    assert markdown[0].startswith(HOST_LINE) and "**untrusted**" in markdown[0]
    assert forged not in markdown
    assert markdown[2] == "### torchyard parity: cpu on cpu, torch 2.14.1, untrusted run; suites: export"
    assert markdown[3] == "body, a trusted run in words"  # the host sets the title and its own line, nothing more


def test_a_link_left_in_place_of_a_report_is_replaced_not_written_through(tmp_path: Path) -> None:
    (tmp_path / "victim").write_text("the host's")
    (tmp_path / "reports").mkdir()
    (tmp_path / "reports" / "env.json").symlink_to(tmp_path / "victim")
    stamp_reports(tmp_path / "reports", {"trust": "untrusted", "entry": "cpu", "image": "i"})
    assert (tmp_path / "victim").read_text() == "the host's"
    assert not (tmp_path / "reports" / "env.json").is_symlink()


def test_a_chain_deeper_than_the_stack_is_counted_while_it_is_written(tmp_path: Path) -> None:
    """The watch counts what a run writes every second; a chain of 1,100 folders (as the attacker's test in
    test_trust.py plants) neither recurses nor stops the count."""
    handle = os.open(tmp_path, os.O_RDONLY)
    for _ in range(1100):
        os.mkdir("d", dir_fd=handle)
        inner = os.open("d", os.O_RDONLY, dir_fd=handle)
        os.close(handle)
        handle = inner
    os.close(handle)
    (tmp_path / "top").write_bytes(b"x" * 10)
    try:
        assert folder_bytes(tmp_path) >= 10
    finally:
        empty_folder(tmp_path)  # pytest's own clean-up of old temporary folders recurses: leave no chain to it
