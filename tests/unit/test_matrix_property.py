"""Whatever TOML a person writes, torchyard answers with a valid plan or one line and exit status 2."""

from __future__ import annotations

import datetime as dt
import tomllib
from pathlib import Path
from typing import Any

import pytest
import tomli_w
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.unit.matrix_text import VALID
from torchyard.cli import main
from torchyard.matrix import Plan, parse_plan

REPO = Path(__file__).parents[2]

scalars = st.one_of(
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=True),
    st.text(max_size=20),
    st.dates(),
    st.datetimes(timezones=st.none() | st.just(dt.UTC)),
    st.sampled_from(["3.12", "cpu", "cuda", "pypi", "torch", "export", "2026-01-01"]),
)
keys = st.one_of(
    st.text(min_size=1, max_size=12),
    st.sampled_from(["name", "python", "requirements", "entry", "indexes", "accelerators", "suites", "vendor"]),
)
values = st.recursive(
    scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(keys, children, max_size=4),
    max_leaves=12,
)


def _paths(document: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [prefix]
    if isinstance(document, dict):
        for key, value in document.items():
            found += _paths(value, (*prefix, key))
    elif isinstance(document, list):
        for position, value in enumerate(document):
            found += _paths(value, (*prefix, position))
    return found


@st.composite
def mutated_documents(draw: st.DrawFn) -> dict[str, Any]:
    """The valid matrix with a few of its values replaced, removed or added."""
    document: dict[str, Any] = tomllib.loads(VALID)
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        path = draw(st.sampled_from(_paths(document)[1:]))
        parent = document
        for step in path[:-1]:
            parent = parent[step]
        action = draw(st.sampled_from(["replace", "remove", "add"]))
        if action == "remove":
            del parent[path[-1]]
        elif action == "add" and isinstance(parent, dict):
            parent[draw(keys)] = draw(values)
        else:
            parent[path[-1]] = draw(values)
    return document


def _assert_plan_or_one_line(text: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    matrix = tmp_path / "matrix.toml"
    matrix.write_text(text, encoding="utf-8")
    status = main(["plan", "--matrix", str(matrix)])
    out, err = capsys.readouterr()
    if status == 0:
        assert err == ""
        assert out.startswith("| entry")
    else:
        assert status == 2, err
        assert out == ""
        assert err.count("\n") == 1 and err.startswith("torchyard: matrix.toml: "), err


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(document=mutated_documents())
def test_mutated_matrix_gives_a_plan_or_one_line(
    document: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    try:
        text = tomli_w.dumps(document)
    except (TypeError, ValueError):
        return  # not expressible in TOML (e.g. a NaN key); nothing a person could write
    _assert_plan_or_one_line(text, tmp_path, capsys)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(document=st.dictionaries(keys, values, max_size=6))
def test_arbitrary_toml_gives_a_plan_or_one_line(
    document: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    try:
        text = tomli_w.dumps(document)
    except (TypeError, ValueError):
        return
    _assert_plan_or_one_line(text, tmp_path, capsys)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.text(max_size=200))
def test_arbitrary_text_gives_a_plan_or_one_line(text: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _assert_plan_or_one_line(text, tmp_path, capsys)


def test_the_unmutated_document_round_trips() -> None:
    assert isinstance(parse_plan(tomli_w.dumps(tomllib.loads(VALID)), Path("matrix.toml")), Plan)


def _assert_ok_or_one_line(argv: list[str], capsys: pytest.CaptureFixture[str], *, statuses: set[int]) -> int:
    status = main(argv)
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    if status != 0:
        assert status in statuses, err
        assert err.count("\n") == 1 and err.startswith("torchyard: "), err
    return status


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.binary(max_size=300), depth=st.integers(min_value=0, max_value=20000))
def test_any_bytes_or_nesting_in_matrix_toml_give_a_plan_or_one_line(
    data: bytes, depth: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    matrix = tmp_path / "matrix.toml"
    matrix.write_bytes(data + b"\nx = " + b"[" * depth + b"]" * depth + b"\n")
    _assert_ok_or_one_line(["plan", "--matrix", str(matrix)], capsys, statuses={2})


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.binary(max_size=300), folder=st.booleans())
def test_any_lockfile_is_fresh_stale_or_missing_never_a_traceback(
    data: bytes, folder: bool, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("torchyard.commands.lock.uv_version", lambda runner: "0.13.9")
    lockdir = tmp_path / "locks"
    lockdir.mkdir(exist_ok=True)
    lock = lockdir / "cpu.txt"
    if lock.is_dir():
        lock.rmdir()
    elif lock.exists():
        lock.unlink()
    if folder:
        lock.mkdir()
    else:
        lock.write_bytes(data)
    argv = ["lock", "--check", "--matrix", str(REPO / "matrix.toml"), "--lockdir", str(lockdir), "cpu"]
    assert _assert_ok_or_one_line(argv, capsys, statuses={1}) == 1


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.binary(max_size=300))
def test_any_machine_file_gives_settings_or_one_line(
    data: bytes, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    machine = tmp_path / "machine.toml"
    machine.write_bytes(data)
    monkeypatch.setenv("TORCHYARD_MACHINE_FILE", str(machine))
    _assert_ok_or_one_line(["plan", "--matrix", str(REPO / "matrix.toml")], capsys, statuses={2})
