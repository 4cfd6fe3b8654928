"""`torchyard matrix --github`: hosted means one GitHub-hosted label, and an untrusted run's labels are the
trusted matrix.toml's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.unit.matrix_text import VALID
from torchyard.cli import main
from torchyard.commands.matrix import hosted_labels, is_hosted, matrix_include, trusted_runs_on
from torchyard.matrix import load_plan
from torchyard.matrix.schema import Entry

TRUSTED_CUDA = 'runs-on = ["self-hosted", "gpu", "cuda"]'


def entries(tmp_path: Path, cuda_runs_on: str, name: str = "matrix.toml") -> tuple[Entry, ...]:
    path = tmp_path / name
    path.write_text(VALID.replace(TRUSTED_CUDA, f"runs-on = {cuda_runs_on}"))
    return load_plan(path).entries


def split(include: dict[str, list[dict[str, object]]]) -> list[str]:
    return [str(item["name"]) for item in include["include"]]


@pytest.mark.parametrize(
    ("runs_on", "hosted"),
    [
        ('["linux", "x64", "gpu", "cuda"]', False),  # a self-hosted runner needs no `self-hosted` label
        ('["ubuntu-24.04", "gpu"]', False),  # a hosted label beside another: a runner with both may be anyone's
        ('["gpu"]', False),
        ('["ubuntu-24.04"]', True),
        ('["macos-14-xlarge"]', True),
    ],
)
def test_an_entry_is_hosted_only_on_one_github_hosted_label(tmp_path: Path, runs_on: str, hosted: bool) -> None:
    plan = entries(tmp_path, runs_on)
    assert split(matrix_include(plan, runners="hosted")) == (["cpu", "cuda"] if hosted else ["cpu"])
    assert split(matrix_include(plan, runners="self-hosted")) == ([] if hosted else ["cuda"])
    assert split(matrix_include(plan)) == ["cpu", "cuda"]


def test_the_hosted_labels_are_github_runner_labels_only() -> None:
    labels = hosted_labels()
    assert {"ubuntu-24.04", "ubuntu-latest", "windows-11-arm", "macos-15-intel", "macos-latest-large"} <= labels
    assert not labels & {"self-hosted", "linux", "x64", "arm64", "macOS", "gpu"}
    assert not is_hosted([]) and not is_hosted(["ubuntu-24.04", "ubuntu-22.04"])


def test_an_untrusted_run_takes_the_trusted_labels(tmp_path: Path) -> None:
    trusted = tmp_path / "trusted.toml"
    trusted.write_text(VALID)
    hostile = entries(tmp_path, '["ubuntu-24.04"]')  # the pull request moves cuda onto a hosted label...
    env = {"TORCHYARD_TRUST": "untrusted", "TORCHYARD_TRUSTED_MATRIX": str(trusted)}
    labels = trusted_runs_on(env)
    assert labels == {"cpu": ("ubuntu-24.04",), "cuda": ("self-hosted", "gpu", "cuda")}
    # ...and still runs only where the trusted matrix says, on the self-hosted side.
    assert split(matrix_include(hostile, runners="hosted", trusted=labels)) == ["cpu"]
    (cuda,) = matrix_include(hostile, runners="self-hosted", trusted=labels)["include"]
    assert cuda["runs-on"] == ["self-hosted", "gpu", "cuda"]
    # A trusted run, or one with no trusted matrix named, keeps its own labels.
    assert trusted_runs_on({"TORCHYARD_TRUST": "trusted", "TORCHYARD_TRUSTED_MATRIX": str(trusted)}) is None
    assert trusted_runs_on({"TORCHYARD_TRUST": "untrusted"}) is None


def test_an_accelerator_the_trusted_matrix_lacks_waits_until_trusted(tmp_path: Path) -> None:
    trusted = {"cpu": ("ubuntu-24.04",)}
    plan = entries(tmp_path, '["ubuntu-24.04"]')
    assert split(matrix_include(plan, trusted=trusted)) == ["cpu"]
    assert split(matrix_include(plan, runners="self-hosted", trusted=trusted)) == []


def test_the_command_reads_the_trusted_matrix_in_an_untrusted_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    trusted = tmp_path / "trusted.toml"
    trusted.write_text(VALID)
    entries(tmp_path, '["linux", "x64", "gpu", "cuda"]')
    monkeypatch.setenv("TORCHYARD_TRUST", "untrusted")
    monkeypatch.setenv("TORCHYARD_TRUSTED_MATRIX", str(trusted))
    assert main(["matrix", "--github", "--matrix", str(tmp_path / "matrix.toml"), "--runners", "self-hosted"]) == 0
    (cuda,) = json.loads(capsys.readouterr().out)["include"]
    assert cuda["runs-on"] == ["self-hosted", "gpu", "cuda"]
