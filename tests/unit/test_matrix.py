"""`torchyard matrix --github`: hosted means one GitHub-hosted label, and an untrusted run's labels are the
trusted matrix.toml's (the trust gate refuses any other)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.unit.matrix_text import VALID
from torchyard.cli import main
from torchyard.commands.matrix import hosted_labels, is_hosted, matrix_include
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


def test_the_command_refuses_an_untrusted_run_that_moves_an_entrys_runner(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The critical route: the pull request sets cuda's runs-on to labels without the word self-hosted."""
    trusted = tmp_path / "trusted.toml"
    trusted.write_text(VALID)
    entries(tmp_path, '["linux", "x64", "gpu", "cuda"]')
    monkeypatch.setenv("TORCHYARD_TRUST", "untrusted")
    monkeypatch.setenv("TORCHYARD_TRUSTED_MATRIX", str(trusted))
    assert main(["matrix", "--github", "--matrix", str(tmp_path / "matrix.toml"), "--runners", "hosted"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith(
        'torchyard: matrix.toml: entry "cuda" > accelerators > cuda: this untrusted run changes runs-on'
    )
    entries(tmp_path, '["self-hosted", "gpu", "cuda"]')
    assert main(["matrix", "--github", "--matrix", str(tmp_path / "matrix.toml"), "--runners", "self-hosted"]) == 0
    (cuda,) = json.loads(capsys.readouterr().out)["include"]
    assert cuda["runs-on"] == ["self-hosted", "gpu", "cuda"]
