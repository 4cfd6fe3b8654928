"""The hand-back: the reports folder as hostile code leaves it; links are removed, never followed; one run at a
time."""

from __future__ import annotations

import ctypes
import fcntl
import os
from pathlib import Path

import pytest

from torchyard import contract
from torchyard.errors import UsageError
from torchyard.run.handback import (
    HandBackError,
    crash_note,
    empty_folder,
    exclusive_run,
    fresh_folder,
    hand_back,
    read_report,
    reports_folder,
)
from torchyard.util.folders import ENTRY_BYTES, folder_bytes


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


def test_a_run_starts_from_an_empty_folder_and_keeps_the_last_runs_reports(tmp_path: Path) -> None:
    """Issue 71, item 8: a second run emptied the first one's reports 40 s in; now the last run's reports stay,
    hidden beside the folder (no report reads them as a run), and the one before goes."""
    reports = tmp_path / "cpu"
    reports.mkdir()
    (reports / "parity.md").write_text("last run's table\n")
    (reports / "nested").mkdir()
    (reports / "nested" / "ops.md").write_text("ops\n")
    fresh_folder(reports)
    assert list(reports.iterdir()) == []
    previous = tmp_path / ".cpu.previous"
    assert (previous / "parity.md").read_text() == "last run's table\n" and (previous / "nested" / "ops.md").is_file()
    (reports / "parity.md").write_text("this run's table\n")
    fresh_folder(reports)
    assert sorted(item.name for item in previous.iterdir()) == ["parity.md"]
    assert (previous / "parity.md").read_text() == "this run's table\n"
    fresh_folder(reports)  # an empty folder leaves the kept run as it is
    assert (previous / "parity.md").read_text() == "this run's table\n"
    (tmp_path / ".cpu.previous").rename(tmp_path / "moved")
    (tmp_path / ".cpu.previous").symlink_to(tmp_path / "moved")
    (reports / "parity.md").write_text("a third\n")
    with pytest.raises(UsageError, match="is a symbolic link"):  # never moved through a link
        fresh_folder(reports)


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
    (tmp_path / "huge-elsewhere").write_bytes(b"x" * (1 << 20))
    (tmp_path / "a" / "link").symlink_to(tmp_path / "huge-elsewhere")
    # the file as the disk holds it (its blocks), and each of the two entries; never what the link points at
    assert 1000 + 2 * ENTRY_BYTES <= folder_bytes(tmp_path / "a") < 1 << 16


def test_what_a_run_hides_from_sizes_is_counted_as_the_disk_holds_it(tmp_path: Path) -> None:
    """A helper's routes around a count of sizes: space allocated past a file's end (fallocate's KEEP_SIZE,
    size 0) and thousands of empty files each count."""
    libc = ctypes.CDLL(None, use_errno=True)
    with (tmp_path / "kept").open("wb") as stream:
        if libc.fallocate(stream.fileno(), 1, ctypes.c_long(0), ctypes.c_long(8 << 20)) != 0:  # FALLOC_FL_KEEP_SIZE
            pytest.skip(f"this filesystem allocates no space past a file's end: {os.strerror(ctypes.get_errno())}")
    assert (tmp_path / "kept").stat().st_size == 0
    assert folder_bytes(tmp_path) >= 8 << 20
    (tmp_path / "many").mkdir()
    for number in range(2000):
        (tmp_path / "many" / str(number)).touch()
    assert folder_bytes(tmp_path / "many") >= 2000 * ENTRY_BYTES


def test_a_report_past_the_bound_is_refused_before_it_is_read(tmp_path: Path) -> None:
    """A parity.json of `[{}, ...]` costs the host many times its size to parse: past 64 MiB, none is read."""
    with (tmp_path / "env.json").open("wb") as stream:
        stream.truncate(contract.MAX_REPORT_BYTES + 1)  # sparse: no disk spent
    with pytest.raises(HandBackError, match="larger than 64 MiB"):
        read_report(tmp_path / "env.json")


def test_a_chain_deeper_than_the_stack_is_counted_while_it_is_written(tmp_path: Path) -> None:
    """The watch counts what a run writes every second; a chain of 1,100 folders neither recurses nor hides what
    lies at its bottom: a helper's route was a file at the bottom of such a chain, which the recursive walk gave
    up before it counted (Python 3.11 and 3.12's os.fwalk). A chain deeper than the count goes counts as over
    any bound, so the run is stopped (its message names the depth)."""
    handle = os.open(tmp_path, os.O_RDONLY)
    for _ in range(1100):
        os.mkdir("d", dir_fd=handle)
        inner = os.open("d", os.O_RDONLY, dir_fd=handle)
        os.close(handle)
        handle = inner
    hidden = os.open("hidden", os.O_WRONLY | os.O_CREAT, 0o600, dir_fd=handle)
    os.write(hidden, b"x" * 100_000)
    os.close(hidden)
    os.close(handle)
    (tmp_path / "top").write_bytes(b"x" * 10)
    (tmp_path / "shallow" / "a" / "b").mkdir(parents=True)
    (tmp_path / "shallow" / "a" / "b" / "f").write_bytes(b"x" * 7)
    try:
        assert folder_bytes(tmp_path) > 100_000
        assert 7 + 3 * ENTRY_BYTES <= folder_bytes(tmp_path / "shallow") < 7 + 3 * ENTRY_BYTES + (1 << 16)
    finally:
        empty_folder(tmp_path)  # pytest's own clean-up of old temporary folders recurses: leave no chain to it


@pytest.mark.parametrize(
    ("status", "in_container", "said"),
    [(-11, False, "SIGSEGV"), (-6, False, "SIGABRT"), (139, True, "SIGSEGV"), (134, True, "SIGABRT")],
)
def test_a_run_that_died_of_a_crash_names_the_signal_and_its_test(
    tmp_path: Path, status: int, in_container: bool, said: str
) -> None:
    (tmp_path / contract.RUNNING).write_text("suites/test_aot.py::test_aot_package_loads_and_runs[mlp]\n")
    note = crash_note(tmp_path, status, in_container=in_container)
    assert note is not None and note.startswith(
        f"the tests' process died of {said} in suites/test_aot.py::test_aot_package_loads_and_runs[mlp]: "
    )


@pytest.mark.parametrize(("status", "in_container"), [(0, False), (1, False), (2, True), (137, True), (139, False)])
def test_other_statuses_are_no_crash(tmp_path: Path, status: int, in_container: bool) -> None:
    """A failing run, the kernel's kill (said apart by the caller), and 139 from a process that is no shell."""
    (tmp_path / contract.RUNNING).write_text("t.py::test\n")
    assert crash_note(tmp_path, status, in_container=in_container) is None


def test_the_test_a_crash_names_is_read_as_hostile_text(tmp_path: Path) -> None:
    """The run writes the file: no escape sequence reaches the terminal, no link is followed, its length is bounded."""
    (tmp_path / contract.RUNNING).write_text("t.py::x\x1b[2J\x1b]0;owned\x07" + "y" * 1000)
    note = crash_note(tmp_path, -11, in_container=False)
    assert note is not None and "\x1b" not in note and "\x07" not in note and "y" * 301 not in note
    (tmp_path / contract.RUNNING).unlink()
    (tmp_path / "secret").write_text("host file")
    (tmp_path / contract.RUNNING).symlink_to(tmp_path / "secret")
    assert crash_note(tmp_path, -11, in_container=False) == (
        "the tests' process died of SIGSEGV: a native crash (a backend's runtime or a compiled library it loads), "
        "so the run wrote no report"
    )
