"""Route 7 of issue 57: the wheel build's output folder is bounded while the backend writes it, and the wheels
are streamed back, never read whole into memory."""

from __future__ import annotations

import shutil
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import BinaryIO

import pytest

from torchyard.errors import ImageBuildError
from torchyard.image import wheel
from torchyard.image.source import ProjectFile


def test_a_folder_written_past_its_bound_stops_the_writer(tmp_path: Path) -> None:
    stopped = threading.Event()
    with wheel.bounded(tmp_path, 1000, stopped.set, interval=0.01) as past:
        (tmp_path / "big").write_bytes(b"x" * 2000)
        assert stopped.wait(5)
    assert past.is_set()
    with wheel.bounded(tmp_path / "small", 1000, pytest.fail, interval=0.01) as fine:
        time.sleep(0.05)
    assert not fine.is_set()


def test_a_backend_that_fills_its_output_folder_is_killed_and_the_build_stops_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(wheel, "WHEEL_OUTPUT_LIMIT", 4096)
    monkeypatch.setattr(wheel, "WATCH_INTERVAL_S", 0.01)
    killed = threading.Event()
    calls: list[tuple[str, ...]] = []

    def runner(
        args: Sequence[str], *, env: Mapping[str, str] | None = None, **_: object
    ) -> subprocess.CompletedProcess[str]:
        calls.append(tuple(args))
        if args[1] == "kill":
            killed.set()
        elif args[-1].startswith("cp -R /src"):  # the build: it writes until it is killed
            out = next(arg for arg in args if arg.endswith(",target=/out")).split(",")[1].removeprefix("source=")
            with (Path(out) / "junk").open("wb") as junk:
                while not killed.is_set():
                    junk.write(b"x" * 1024)
                    junk.flush()
                    time.sleep(0.001)
        return subprocess.CompletedProcess(args, 0, "", "")

    target = tmp_path / "project"
    target.mkdir()
    with pytest.raises(ImageBuildError, match="more than 0 MiB into its output folder and was stopped"):
        wheel.build_wheel_sealed(
            "e", [ProjectFile("pyproject.toml", "file", b"")], target, requires=(), image="sha256:i",
            docker_path="docker", sources=(), host_network=False, ca_bundle=None, runner=runner, env={},
        )  # fmt: skip
    assert any(call[1] == "kill" and call[2].endswith("-build") for call in calls)


def test_wheels_are_streamed_back_within_the_bound(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out, target = tmp_path / "out", tmp_path / "target"
    out.mkdir()
    target.mkdir()
    (out / "a-1-py3-none-any.whl").write_bytes(b"a" * 100)
    (out / "b-1-py3-none-any.whl").write_bytes(b"b" * 100)
    streamed: list[str] = []
    real = shutil.copyfileobj

    def copying(source: BinaryIO, target: BinaryIO) -> None:
        streamed.append(target.name)
        real(source, target)

    monkeypatch.setattr(shutil, "copyfileobj", copying)
    assert [path.name for path in wheel.take_wheels(out, target)] == sorted(path.name for path in out.iterdir())
    assert len(streamed) == 2 and (target / "b-1-py3-none-any.whl").read_bytes() == b"b" * 100
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    with pytest.raises(ImageBuildError, match="not a wheel within its output's bound"):
        wheel.take_wheels(out, fresh, limit=150)
