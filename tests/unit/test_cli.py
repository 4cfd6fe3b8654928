from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from tests.unit.matrix_text import VALID
from torchyard.cli import build_parser, main
from torchyard.commands.sessions import run_nox
from torchyard.matrix import Entry
from torchyard.matrix.machine import Machine, load_machine

REPO = Path(__file__).parents[2]


@pytest.fixture
def matrix(tmp_path: Path) -> Path:
    path = tmp_path / "matrix.toml"
    path.write_text(VALID, encoding="utf-8")
    return path


def test_plan_prints_a_markdown_table(matrix: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--matrix", str(matrix)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split("|")[1].strip() == "entry"
    assert lines[1].startswith("|---")
    assert [line.split("|")[1].strip() for line in lines[2:]] == ["cpu", "cuda"]


def test_plan_shows_this_machines_base_override(
    matrix: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("TORCHYARD_BASE_IMAGES", "cpu=torchyard/base:bookworm")
    assert main(["plan", "--matrix", str(matrix)]) == 0
    bases = {line.split("|")[1].strip(): line.split("|")[4].strip() for line in capsys.readouterr().out.splitlines()}
    assert bases["cpu"].startswith("torchyard/base:bookworm (this machine's, not ")
    assert "@sha256:" in bases["cuda"] and "this machine" not in bases["cuda"]


def test_matrix_github_json(matrix: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["matrix", "--github", "--matrix", str(matrix), "--entry", "cuda"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document == {
        "include": [
            {
                "name": "cuda",
                "accelerator": "cuda",
                "runs-on": ["self-hosted", "gpu", "cuda"],
                "session": "test-cuda",
                "python": "3.12",
                "native": False,
                "lock-on-runner": False,
            }
        ]
    }


def test_committed_matrix_has_the_six_entries(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["matrix", "--github", "--matrix", str(REPO / "matrix.toml")]) == 0
    include = json.loads(capsys.readouterr().out)["include"]
    assert [(item["name"], item["session"]) for item in include] == [
        ("cpu", "test-cpu"),
        ("cpu-bf16", "test-cpu"),
        ("cuda", "test-cuda"),
        ("rocm", "test-rocm"),
        ("xpu", "test-xpu"),
        ("mps", "test-mps"),
    ]
    assert include[0]["runs-on"] == include[1]["runs-on"] == ["ubuntu-24.04"]
    assert all("self-hosted" in item["runs-on"] for item in include[2:])


def test_bad_selection_is_one_line_and_exit_2(matrix: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--matrix", str(matrix), "--entry", "nope"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == "torchyard: matrix.toml: no entry named 'nope' (entries: cpu, cuda)\n"


def test_missing_matrix_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--matrix", str(tmp_path / "absent.toml")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "absent.toml: no such file" in err


def test_lock_check_reports_missing_and_fails(
    matrix: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("torchyard.commands.lock.uv_version", lambda runner: "0.13.9")
    args = ["lock", "--check", "--lockdir", str(tmp_path / "locks")]
    assert main([*args, "--matrix", str(matrix)]) == 1
    captured = capsys.readouterr()
    assert "| cpu   | missing |" in captured.out
    assert captured.err == (
        "torchyard: 2 of 2 locks not fresh: cpu, cuda; remake them: `nox -s lock -- cpu cuda`"
        " (or `torchyard lock cpu cuda`)\n"
    )
    # The file decides: an entry locked on its runner may lack a lock here; every other missing lock fails.
    on_runner = tmp_path / "on-runner.toml"
    on_runner.write_text(VALID.replace('name = "cuda"\n', 'name = "cuda"\nlock-on-runner = true\n'))
    assert main([*args, "--matrix", str(on_runner)]) == 1
    captured = capsys.readouterr()
    assert captured.err == (
        "torchyard: 1 of 2 locks not fresh: cpu; remake them: `nox -s lock -- cpu` (or `torchyard lock cpu`)\n"
    )
    assert "locked on its runner (self-hosted, gpu, cuda) before its image" in captured.out
    assert main([*args, "--matrix", str(on_runner), "--entry", "cuda"]) == 0
    with pytest.raises(SystemExit) as refused:  # no flag excuses a missing lock
        main([*args, "--matrix", str(matrix), "--allow-missing", "cuda"])
    assert refused.value.code == 2


def test_double_dash_separates_pytest_arguments(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, object] = {}

    def fake_test(entries: tuple[Entry, ...], **kwargs: object) -> int:
        seen["entries"] = [entry.name for entry in entries]
        seen["pytest"] = kwargs["pytest_args"]
        return 0

    monkeypatch.setattr("torchyard.cli.test_entries", fake_test)
    assert main(["test", "--matrix", str(REPO / "matrix.toml"), "cpu", "-q", "--", "-k", "cuda", "rocm"]) == 0
    assert seen == {"entries": ["cpu"], "pytest": ["-q", "-k", "cuda", "rocm"]}


def test_an_ops_shard_reaches_the_ops_suite_as_its_option(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    seen: dict[str, object] = {}

    def fake_test(entries: tuple[Entry, ...], **kwargs: object) -> int:
        seen["pytest"] = kwargs["pytest_args"]
        return 0

    monkeypatch.setattr("torchyard.cli.test_entries", fake_test)
    assert main(["test", "--matrix", str(REPO / "matrix.toml"), "cpu", "--ops-shard", "2/4", "--", "-x"]) == 0
    assert seen == {"pytest": ["-x", "--torchyard-ops-shard=2/4"]}
    with pytest.raises(SystemExit) as refused:
        main(["test", "--matrix", str(REPO / "matrix.toml"), "cpu", "--ops-shard", "5/4"])
    assert refused.value.code == 2
    assert "argument --ops-shard: expected K/N with 1 <= K <= N" in capsys.readouterr().err


def _entries_run(monkeypatch: pytest.MonkeyPatch) -> dict[str, tuple[str, ...]]:
    """What `torchyard test` hands the runs: each entry's name and the suites it runs."""
    seen: dict[str, tuple[str, ...]] = {}

    def fake_test(entries: tuple[Entry, ...], **kwargs: object) -> int:
        seen.update((entry.name, entry.suites) for entry in entries)
        return 0

    monkeypatch.setattr("torchyard.cli.test_entries", fake_test)
    return seen


def test_suite_narrows_each_entry_to_the_named_suites_in_its_order(
    matrix: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen = _entries_run(monkeypatch)
    assert main(["test", "--matrix", str(matrix), "--suite", "parity", "--suite", "export"]) == 0
    assert seen == {"cpu": ("export", "parity"), "cuda": ("export", "parity")}
    seen.clear()
    assert main(["test", "--matrix", str(matrix), "cpu", "--suite", "compile"]) == 0
    assert seen == {"cpu": ("compile",)}
    seen.clear()
    assert main(["test", "--matrix", str(matrix), "cpu"]) == 0  # no --suite: every suite of the entry's
    assert seen == {"cpu": ("export", "compile", "runtime", "parity", "train")}


def test_a_suite_an_entry_does_not_run_is_one_line_before_any_run(
    matrix: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    seen = _entries_run(monkeypatch)
    assert main(["test", "--matrix", str(matrix), "--suite", "runtime", "--suite", "compile", "--suite", "export"]) == 2
    assert seen == {}
    assert capsys.readouterr().err == (
        "torchyard: matrix.toml: entry 'cuda' does not run the suites runtime, compile (its suites: export, parity)\n"
    )
    with pytest.raises(SystemExit) as exited:  # not a suite at all: argparse names the choices
        main(["test", "--matrix", str(matrix), "--suite", "speed"])
    assert exited.value.code == 2 and "invalid choice: 'speed'" in capsys.readouterr().err
    assert seen == {}


def test_push_without_a_registry_is_one_line_before_any_work(
    matrix: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("TORCHYARD_MACHINE_FILE", str(tmp_path / "none.toml"))
    monkeypatch.delenv("TORCHYARD_REGISTRY", raising=False)
    status = main(["build", "--matrix", str(matrix), "--lockdir", str(tmp_path), "--push", "cpu"])
    assert status == 1
    assert capsys.readouterr().err.splitlines()[-1] == (
        "torchyard: --push needs a registry: set TORCHYARD_REGISTRY (host[:port]/path) or [registry] name in "
        "machine.toml"
    )


def test_the_machine_is_read_once_at_the_edge_and_passed_in(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    machine_file = tmp_path / "machine.toml"
    machine_file.write_text("[limits]\npids = 512\n[allow]\nnetwork = true\n")
    monkeypatch.setenv("TORCHYARD_MACHINE_FILE", str(machine_file))
    loads: list[Machine] = []

    def counted(env: Mapping[str, str]) -> Machine:
        loads.append(load_machine(env))
        return loads[-1]

    given: list[object] = []

    def fake_test(entries: tuple[Entry, ...], **kwargs: object) -> int:
        given.append(kwargs["machine"])
        return 0

    monkeypatch.setattr("torchyard.cli.load_machine", counted)
    monkeypatch.setattr("torchyard.cli.test_entries", fake_test)
    assert main(["test", "--matrix", str(REPO / "matrix.toml"), "cpu", "cpu-bf16"]) == 0
    assert len(loads) == 1 and given == loads and loads[0].limits.pids == 512 and loads[0].allows_network
    # A bad setting stops every command that reads the machine in one line, before any work; the commands
    # that read none of it (init, nox, report, base, prune) are not stopped by it.
    machine_file.write_text("[limits]\npids = 3\n")
    assert main(["plan", "--matrix", str(REPO / "matrix.toml")]) == 2
    assert capsys.readouterr() == (
        "",
        f"torchyard: {machine_file}: limits > pids: expected a whole number of at least 64, got 3\n",
    )
    monkeypatch.setattr("torchyard.cli.make_base", lambda tag, *, suite: "sha256:0")
    assert main(["base"]) == 0 and len(loads) == 1  # the failed load above added none; base loaded none


def test_nox_runs_from_torchyards_own_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """`torchyard nox ...` is nox run by this interpreter, every argument passed on as given."""
    seen: list[list[str]] = []

    def fake(args: Sequence[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
        seen.append(list(args))
        assert kwargs == {"check": False}
        return subprocess.CompletedProcess(args, 3, "", "")

    monkeypatch.setattr("torchyard.cli.run_nox", lambda args: run_nox(args, runner=fake))
    assert main(["nox", "-s", "test-cpu", "--", "--local", "--help"]) == 3
    # `-P`: the working folder (a checkout) never first on sys.path, where a committed `nox/` would shadow nox
    assert seen == [[sys.executable, "-P", "-m", "nox", "-s", "test-cpu", "--", "--local", "--help"]]


def test_base_bootstraps_the_named_suite_into_its_own_tag(monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[tuple[str, str]] = []

    def make_base(tag: str, *, suite: str) -> str:
        made.append((tag, suite))
        return "sha256:0"

    monkeypatch.setattr("torchyard.cli.make_base", make_base)
    assert main(["base", "--suite", "trixie"]) == 0
    assert main(["base"]) == 0
    assert made == [("torchyard/base:trixie", "trixie"), ("torchyard/base:bookworm", "bookworm")]


def test_base_refuses_a_suite_it_cannot_make(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["base", "--suite", "sid"])
    assert exited.value.code == 2 and "invalid choice: 'sid'" in capsys.readouterr().err


@pytest.mark.parametrize("tag", ["bad tag!", "Upper/Case:x", "torchyard/base@sha256:" + "0" * 64, "-rm"])
def test_base_refuses_a_tag_docker_cannot_import_before_bootstrapping(
    tag: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("torchyard.cli.make_base", lambda tag, *, suite: pytest.fail("bootstrapped"))
    with pytest.raises(SystemExit) as exited:
        main(["base", f"--tag={tag}"])
    err = capsys.readouterr().err
    assert exited.value.code == 2 and f"argument --tag: {tag!r} is not an image name" in err
    assert len(err.strip().splitlines()) == 2  # argparse's usage line and the one error line


def test_base_takes_a_registry_tag() -> None:
    args = build_parser().parse_args(["base", "--tag", "registry.local:5000/team/base:bookworm-1"])
    assert args.tag == "registry.local:5000/team/base:bookworm-1"


def test_locking_every_entry_leaves_those_locked_on_their_runner(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """refresh.yml runs `nox -s lock` where cuda's and xpu's indexes cannot be reached: those wait for their
    runner; naming one still locks it."""
    locked: list[str] = []
    (tmp_path / "none").write_text("")

    def fake_lock(entry: Entry, lockdir: Path, mirrors: object, **_: object) -> Path:
        locked.append(entry.name)
        return tmp_path / "none"

    monkeypatch.setattr("torchyard.commands.lock.lock_entry", fake_lock)
    on_runner = tmp_path / "on-runner.toml"
    on_runner.write_text(VALID.replace('name = "cuda"\n', 'name = "cuda"\nlock-on-runner = true\n'))
    assert main(["lock", "--matrix", str(on_runner), "--lockdir", str(tmp_path)]) == 0
    assert locked == ["cpu"]
    assert "cuda: locked on its runner (lock-on-runner); name it to lock it here" in capsys.readouterr().err
    assert main(["lock", "cuda", "--matrix", str(on_runner), "--lockdir", str(tmp_path)]) == 0
    assert locked == ["cpu", "cuda"]


@pytest.mark.parametrize("scope", [[], ["--this-project"]], ids=["default", "--this-project"])
def test_prune_of_this_project_without_its_matrix_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], scope: list[str]
) -> None:
    """Refused before the engine is asked anything: a prune of no project must not become a prune of all; a
    prune touches only this project's unless asked for all (issue 71, item 10: a shared engine's other project)."""
    assert main(["prune", *scope, "--matrix", str(tmp_path / "absent.toml")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"torchyard: prune: no {tmp_path / 'absent.toml'} here: --matrix PATH names the project's, --all-projects "
        "prunes every project's"
    ]


def test_prune_takes_this_project_or_all_not_both(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stopped:
        main(["prune", "--this-project", "--all-projects"])
    assert stopped.value.code == 2 and "not allowed with argument" in capsys.readouterr().err


def test_prune_scopes_to_this_project_by_default_and_to_all_when_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked: list[str | None] = []

    def prune(**kwargs: str | None) -> int:
        asked.append(kwargs["project"])
        return 0

    monkeypatch.setattr("torchyard.cli.prune", prune)
    matrix = tmp_path / "matrix.toml"
    matrix.write_text(VALID)
    monkeypatch.delenv("GITHUB_REPOSITORY", raising=False)
    assert main(["prune", "--matrix", str(matrix)]) == 0
    assert main(["prune", "--all-projects", "--matrix", str(tmp_path / "absent.toml")]) == 0
    assert asked[0] and asked[1] is None
