"""Choosing a docker client that can build with BuildKit, with a fake runner."""

from __future__ import annotations

import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from torchyard.errors import DockerUnavailableError
from torchyard.host.engine import DockerCli, build_client


def fake_clients(tmp_path: Path, behaviour: Mapping[str, tuple[bool, str]]) -> tuple[str, object]:
    """Executables named docker in folders; behaviour: folder -> (has buildx, client version)."""
    folders = []
    for folder in behaviour:
        path = tmp_path / folder / "docker"
        path.parent.mkdir()
        path.write_text("#!/bin/sh\n")
        path.chmod(0o755)
        folders.append(str(path.parent))

    def runner(args: Sequence[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
        has_buildx, version = behaviour[Path(args[0]).parent.name]
        if args[1] == "buildx":
            return subprocess.CompletedProcess(args, 0 if has_buildx else 1, "", "")
        return subprocess.CompletedProcess(args, 0, version + "\n", "")

    return ":".join(folders), runner


def test_new_client_without_buildx_is_skipped_for_an_old_one(tmp_path: Path) -> None:
    path, runner = fake_clients(tmp_path, {"new": (False, "28.2.2"), "old": (False, "20.10.24")})
    assert build_client({"PATH": path}, runner) == DockerCli(str(tmp_path / "old" / "docker"), "20.10.24", "buildkit")  # type: ignore[arg-type]


def test_buildx_is_preferred(tmp_path: Path) -> None:
    path, runner = fake_clients(tmp_path, {"new": (True, "28.2.2"), "old": (False, "20.10.24")})
    assert build_client({"PATH": path}, runner).builder == "buildx"  # type: ignore[arg-type]


def test_no_usable_client_says_what_to_install(tmp_path: Path) -> None:
    path, runner = fake_clients(tmp_path, {"new": (False, "28.2.2")})
    with pytest.raises(DockerUnavailableError, match=r"no docker client can build with BuildKit: .*28.2.2, no buildx"):
        build_client({"PATH": path}, runner)  # type: ignore[arg-type]


def test_no_engine_is_one_line_with_how_to_start_one(tmp_path: Path) -> None:
    from torchyard.host.engine import engine

    with pytest.raises(DockerUnavailableError) as caught:
        engine({"DOCKER_HOST": f"unix://{tmp_path}/absent.sock"})
    message = str(caught.value)
    assert message.startswith(f"no Docker engine answers at unix://{tmp_path}/absent.sock")
    assert "sudo systemctl start docker" in message and "\n" not in message
