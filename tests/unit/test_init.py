"""`torchyard init` and `torchyard.nox`: what an adopter's repository gets, without running anything."""

from __future__ import annotations

import datetime as dt
import sys
from pathlib import Path

import nox.registry
import pytest
import yaml

from torchyard.commands.init import init, init_date, render
from torchyard.errors import ConfigError, UsageError
from torchyard.matrix import parse_plan
from torchyard.names import ACCELERATOR_NAMES

TODAY = dt.date(2026, 11, 30)


def project(root: Path, requires: str = ">=3.11", dependencies: str = '["torch>=2.9,<3", "numpy"]') -> Path:
    (root / "pyproject.toml").write_text(
        f'[project]\nname = "robo"\nversion = "1"\nrequires-python = "{requires}"\ndependencies = {dependencies}\n'
    )
    (root / "tests").mkdir()
    return root


def test_the_matrix_comes_from_requires_python_and_the_torch_requirement(tmp_path: Path) -> None:
    files = render(project(tmp_path, requires=">=3.12"), TODAY, "torchyard==0.1.0")
    (tmp_path / "matrix.toml").write_text(files["matrix.toml"])
    (entry,) = parse_plan(files["matrix.toml"], tmp_path / "matrix.toml").entries
    assert (entry.name, entry.python, entry.exclude_newer) == ("cpu", "3.12", "2026-11-30T00:00:00Z")
    assert entry.requirements == ("torch<3,>=2.9", "pytest>=8")
    assert entry.tests == ("tests",) and entry.project is not None and entry.project.name == "robo"
    assert entry.suites == ("export", "compile", "parity", "train")


def test_without_torch_the_entry_asks_for_torch(tmp_path: Path) -> None:
    files = render(project(tmp_path, dependencies="[]"), TODAY, "torchyard==0.1.0")
    assert 'requirements = ["torch", "pytest>=8"]' in files["matrix.toml"]


def test_noxfile_and_workflow(tmp_path: Path) -> None:
    files = render(project(tmp_path), TODAY, "torchyard @ file:///wheels/torchyard-0.1.0-py3-none-any.whl")
    assert "import torchyard.nox\n\ntorchyard.nox.register()\n" in files["noxfile.py"]
    workflow = yaml.safe_load(files[".github/workflows/torchyard.yml"])
    assert set(workflow["jobs"]) == {"plan", "suites", "compatibility", "suites-pull-request"}
    steps = [step.get("run", "") for step in workflow["jobs"]["suites"]["steps"]]
    assert 'python -m pip install "torchyard @ file:///wheels/torchyard-0.1.0-py3-none-any.whl"' in steps
    assert 'nox -s ${{ matrix.session }} -- ${{ matrix.name }} --reports "$RUNNER_TEMP/reports"' in steps


@pytest.mark.parametrize(
    ("requires", "dependencies", "expected"),
    [
        (">=3.14", "[]", "allows none of 3.11, 3.12, 3.13"),
        ("3.11", "[]", "not a version specifier"),
        (">=3.11", '["torch >= nope"]', "not a PEP 508 requirement"),
    ],
)
def test_bad_project_metadata_is_one_line(tmp_path: Path, requires: str, dependencies: str, expected: str) -> None:
    with pytest.raises(ConfigError, match=expected):
        render(project(tmp_path, requires, dependencies), TODAY, "torchyard")


def test_init_never_overwrites_unless_forced(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = project(tmp_path)
    (root / "noxfile.py").write_text("# mine\n")
    with pytest.raises(UsageError, match=r"^noxfile.py already exist: torchyard init never overwrites"):
        init(root, today=TODAY)
    assert (root / "noxfile.py").read_text() == "# mine\n" and not (root / "matrix.toml").exists()
    written = init(root, force=True, today=TODAY, env={"PATH": str(tmp_path / "empty")})
    assert [path.relative_to(root).as_posix() for path in written] == [
        "matrix.toml",
        "noxfile.py",
        ".github/workflows/torchyard.yml",
    ]
    assert capsys.readouterr().out.splitlines()[1].strip().startswith("torchyard nox -s lock")  # no nox on PATH


def test_source_date_epoch_sets_the_day_the_locks_start_at(tmp_path: Path) -> None:
    assert init_date({"SOURCE_DATE_EPOCH": "1795824000"}) == dt.date(2026, 11, 28)  # 2026-11-28T00:00:00Z
    assert init_date({"SOURCE_DATE_EPOCH": "1795910399"}) == dt.date(2026, 11, 28)  # its last second
    assert init_date({}) == dt.datetime.now(dt.UTC).date()
    expected = r"^SOURCE_DATE_EPOCH: expected seconds since 1970 \(an integer\), got 'soon'$"
    with pytest.raises(UsageError, match=expected):
        init_date({"SOURCE_DATE_EPOCH": "soon"})
    init(project(tmp_path), env={"PATH": str(tmp_path), "SOURCE_DATE_EPOCH": "1795824000"})
    assert "exclude-newer = 2026-11-28T00:00:00Z" in (tmp_path / "matrix.toml").read_text()


def test_init_names_the_nox_that_can_import_torchyard(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The nox beside this interpreter can run the sessions; another one on PATH cannot import torchyard."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "nox").write_text("#!/bin/sh\n")
    (elsewhere / "nox").chmod(0o755)
    root = project(tmp_path)
    init(root, today=TODAY, env={"PATH": str(elsewhere)})
    assert capsys.readouterr().out.splitlines()[1].strip().startswith("torchyard nox -s lock")
    init(root, force=True, today=TODAY, env={"PATH": str(Path(sys.executable).parent)})
    assert capsys.readouterr().out.splitlines()[1].strip().startswith("nox -s lock ")


def test_torchyard_nox_registers_the_standard_sessions(monkeypatch: pytest.MonkeyPatch) -> None:
    import torchyard.nox

    monkeypatch.setattr(nox.registry, "_REGISTRY", {})
    torchyard.nox.register()
    expected = {"lock", "matrix", "doctor", "base-image", "refresh", "prune", "report"}
    expected |= {f"{kind}-{name}" for name in ACCELERATOR_NAMES for kind in ("test",)}
    expected |= {f"build-{name}-image" for name in ACCELERATOR_NAMES}
    assert set(nox.registry.get()) == expected
