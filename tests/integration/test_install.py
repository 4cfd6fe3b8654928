"""torchyard installed the way people install command-line tools, from the wheel built from this checkout:
`uv tool install` (README's adoption block, run verbatim), `pipx install`, and a venv that is never
activated. PATH holds no nox, and no uv but the user's own (or a different uv first); from an adopter project
(`examples/robot-policy`) each runs init, lock, lock --check, plan and doctor, and two of them a CPU test run
on the real engine.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import sys
from collections.abc import Iterator, Mapping
from importlib.metadata import version
from pathlib import Path

import docker
import pytest

from tests.docblocks import block
from tests.integration.conftest import ROBOPOLICY
from torchyard.host.engine import build_client
from torchyard.util import proc

REPO = Path(__file__).parents[2]
EXAMPLE = REPO / "examples" / "robot-policy"
UV_VERSION = version("uv")  # the pin torchyard's wheel carries, installed in this test environment too

pytestmark = pytest.mark.integration


@pytest.fixture
def host_tools(tmp_path: Path) -> Path:
    """A folder holding only what torchyard runs from PATH on the host (the docker client it builds with,
    git): no uv, no nox."""
    folder = tmp_path / "host-tools"
    folder.mkdir()
    git = shutil.which("git")
    assert git is not None, "git is not on PATH"
    (folder / "git").symlink_to(git)
    (folder / "docker").symlink_to(build_client(os.environ).path)
    return folder


@pytest.fixture
def adopter(tmp_path: Path, host_tools: Path) -> Path:
    project = tmp_path / "robot-policy"
    shutil.copytree(EXAMPLE, project)
    proc.run(["git", "init", "--quiet"], cwd=project)
    proc.run(["git", "add", "--all"], cwd=project)
    return project


@pytest.fixture
def user_env(machine_env: dict[str, str]) -> dict[str, str]:
    """The machine's settings without this test session's venv: a user's shell, not nox's."""
    return {name: value for name, value in machine_env.items() if name not in ("VIRTUAL_ENV", "PATH")}


@pytest.fixture
def no_leftover_images(client: docker.DockerClient) -> Iterator[None]:
    yield
    for built in client.images.list(filters={"label": "dev.torchyard.project=robopolicy"}):
        with contextlib.suppress(docker.errors.NotFound):  # gone with another tag of it
            client.images.remove(str(built.id), force=True)


def run_in(project: Path, args: list[str], env: Mapping[str, str]) -> str:
    completed = proc.run(args, cwd=project, env=env, capture=True)
    return completed.stdout + completed.stderr


def lock_check_plan_doctor(project: Path, torchyard: str, env: Mapping[str, str], uv_binary: Path) -> None:
    """What every install must do in an adopter project, its lock made by torchyard's own uv."""
    assert "torchyard nox -s lock" in run_in(project, [torchyard, "init"], env)  # no nox on PATH
    run_in(project, [torchyard, "lock"], env)
    check_plan_doctor(project, torchyard, env, uv_binary)


def check_plan_doctor(project: Path, torchyard: str, env: Mapping[str, str], uv_binary: Path) -> None:
    lockfile = (project / "lockfiles" / "cpu.txt").read_text()
    assert f'"uv":"{UV_VERSION}"' in lockfile and "--hash=sha256:" in lockfile
    run_in(project, [torchyard, "lock", "--check"], env)
    assert "| cpu " in run_in(project, [torchyard, "plan"], env)
    doctor = run_in(project, [torchyard, "doctor", "--accelerator", "cpu"], env)
    row = rf"\| uv \(locks, venvs\) +\| {re.escape(UV_VERSION)} at {re.escape(str(uv_binary))}, torchyard's own +\|"
    assert re.search(row, doctor), doctor


def assert_robopolicy_passed(project: Path) -> None:
    results = json.loads((project / "reports" / "cpu" / "parity.json").read_text())["results"]
    passed = {(r["case"], r["backend"]) for r in results if r["outcome"] == "passed"}
    assert {("robopolicy", "eager"), ("robopolicy", "export"), ("robopolicy", "inductor")} <= passed


@pytest.mark.usefixtures("no_leftover_images")
def test_readme_adoption_with_uv_tool_install(
    wheel: Path, adopter: Path, host_tools: Path, user_env: dict[str, str], tmp_path: Path
) -> None:
    """README's three lines, verbatim, beside the wheel and in `my-project`; then the tool's uv is the one used."""
    tools, bindir, user_uv = tmp_path / "uv-tools", tmp_path / "bin", tmp_path / "user-uv"
    work = tmp_path / "work"
    work.mkdir()
    shutil.copy(wheel, work / "torchyard-0.1.0-py3-none-any.whl")
    adopter.rename(work / "my-project")
    project = work / "my-project"
    user_uv.mkdir()  # the user's own uv and Python, which install the tool (torchyard never runs that uv)
    (user_uv / "uv").symlink_to(Path(sys.executable).parent / "uv")  # a binary (PATH may hold a pyenv shim)
    (user_uv / "python3").symlink_to(Path(sys.base_prefix) / "bin" / "python3")
    # the project the guide's adoption (test_adopter.py) ran: its caches and kept results are this run's start
    env = {**user_env, **ROBOPOLICY, "UV_TOOL_DIR": str(tools), "UV_TOOL_BIN_DIR": str(bindir)}
    env["PATH"] = os.pathsep.join((str(bindir), str(host_tools), str(user_uv)))
    assert shutil.which("nox", path=env["PATH"]) is None
    bash = shutil.which("bash")
    assert bash is not None
    proc.run([bash, "-euo", "pipefail", "-c", block("readme-adopt")], cwd=work, env=env)
    assert_robopolicy_passed(project)
    # The sessions ran with the nox beside torchyard; the lock was made by the tool's own uv.
    check_plan_doctor(project, "torchyard", env, tools / "torchyard" / "bin" / "uv")
    run_in(project, ["torchyard", "nox", "-s", "lock", "--", "--check"], env)


def test_pipx_install_runs_every_command(
    wheel: Path, adopter: Path, host_tools: Path, user_env: dict[str, str], tmp_path: Path
) -> None:
    home, bindir = tmp_path / "pipx", tmp_path / "bin"
    pipx = str(Path(sys.executable).parent / "pipx")
    proc.run(
        [pipx, "install", "--quiet", "--python", sys.executable, str(wheel)],
        env={**user_env, "PATH": os.environ["PATH"], "PIPX_HOME": str(home), "PIPX_BIN_DIR": str(bindir)},
    )
    env = {**user_env, "PATH": f"{bindir}{os.pathsep}{host_tools}"}
    assert shutil.which("uv", path=env["PATH"]) is None
    lock_check_plan_doctor(adopter, "torchyard", env, home / "venvs" / "torchyard" / "bin" / "uv")
    sessions = run_in(adopter, ["torchyard", "nox", "--list"], env)
    assert "test-cpu" in sessions and "lock" in sessions


@pytest.mark.usefixtures("no_leftover_images")
def test_a_venv_never_activated_with_another_uv_first_on_path(
    wheel: Path, adopter: Path, host_tools: Path, user_env: dict[str, str], tmp_path: Path
) -> None:
    venv = tmp_path / "venv"
    proc.run(["uv", "venv", "--quiet", "--python", "3.11", str(venv)])
    proc.run(["uv", "pip", "install", "--quiet", "--python", str(venv / "bin" / "python"), str(wheel)])
    other, called = tmp_path / "other-uv", tmp_path / "other-uv-called"
    other.mkdir()
    (other / "uv").write_text(f'#!/bin/sh\necho "$@" >> {called}\necho "uv 0.1.0"\nexit 3\n')
    (other / "uv").chmod(0o755)
    env = {**user_env, "PATH": f"{other}{os.pathsep}{host_tools}"}
    torchyard = str(venv / "bin" / "torchyard")
    lock_check_plan_doctor(adopter, torchyard, env, venv / "bin" / "uv")
    # init leaves the built-in corpus out of a project that has cases of its own (robopolicy's entry point).
    assert "\nbuiltin-cases = false\n" in (adopter / "matrix.toml").read_text()
    # The image too (its lock checked, the wheel built, the layers installed): what a run does with uv before its
    # container starts. The suites in the container are the other tests' (README's and the guide's installs).
    run_in(adopter, [torchyard, "build", "--entry", "cpu"], env)
    assert not called.exists(), f"the uv on PATH ran: {called.read_text()}"
