"""Running entries on the real engine: a GPU entry on this CPU-only host fails before anything runs."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import docker
import pytest

from torchyard.cli import main
from torchyard.commands.build import build_images
from torchyard.host.facts import gather_host_facts
from torchyard.image.plan import BuildOptions
from torchyard.matrix import parse_plan
from torchyard.run.container import RunPlan, container_name, inductor_volume, run_entry, run_user

pytestmark = pytest.mark.integration

REPO = Path(__file__).parents[2]


def test_cuda_entry_on_a_cpu_only_host_names_the_missing_device(capsys: pytest.CaptureFixture[str]) -> None:
    status = main(["test", "--matrix", str(REPO / "matrix.toml"), "cuda"])
    err = capsys.readouterr().err.splitlines()
    assert status == 3
    assert err[-1].startswith("torchyard: entry 'cuda' needs a cuda device: no NVIDIA container runtime or CDI spec")


def test_a_container_killed_for_memory_says_so(
    tmp_path: Path, machine_env: dict[str, str], client: docker.DockerClient, capsys: pytest.CaptureFixture[str]
) -> None:
    # A test that allocates anonymous memory far over the limit: the kernel must kill it (a limit that only
    # squeezes torch's file-backed pages would thrash instead, never killing anything).
    hog = tmp_path / "test_hog.py"
    hog.write_text(
        'def test_hog():\n    block = b"x" * (4 << 30)  # written, so every page is resident\n    assert block\n'
    )
    limits = f'"--memory", "768m", "--memory-swap", "768m", "--mount", "type=bind,source={hog},target=/hog/test_hog.py"'
    text = (
        (REPO / "matrix.toml")
        .read_text()
        .replace('runs-on = ["ubuntu-24.04"]', f'runs-on = ["ubuntu-24.04"]\ndocker-run = [{limits}]')
    )
    entry = parse_plan(text, Path("matrix.toml")).entry("cpu")
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(REPO)
        (image,) = build_images([entry], Path("lockfiles"), BuildOptions(), env=machine_env)
    plan = RunPlan(
        entry="cpu",
        image=image.tag,
        name=container_name(entry),
        reports=tmp_path / "reports",
        volume=inductor_volume(entry),
        user=run_user(os.getuid(), os.getgid()),
    )
    status = run_entry(
        entry, plan, client=client, docker_path="/usr/bin/docker", host=gather_host_facts(client),
        pytest_args=["-q", "/hog/test_hog.py", "-m", "project"],
    )  # fmt: skip
    assert status == 137
    assert "the container for entry 'cpu' was killed: out of memory" in capsys.readouterr().err
    assert not client.containers.list(all=True, filters={"name": plan.name})


def test_ctrl_c_leaves_no_container(machine_env: dict[str, str], client: docker.DockerClient) -> None:
    """SIGINT to the whole `torchyard test` process group, as a terminal's Ctrl-C sends it."""
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(REPO)
        build_images(
            [parse_plan((REPO / "matrix.toml").read_text(), Path("m")).entry("cpu")],
            Path("lockfiles"),
            BuildOptions(),
            env=machine_env,
        )
    process = subprocess.Popen(
        [sys.executable, "-m", "torchyard", "test", "cpu", "-q"],
        cwd=REPO, env=machine_env, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while not client.containers.list(filters={"name": "torchyard-cpu-"}, all=True):
            assert process.poll() is None and time.monotonic() < deadline, "the container never started"
            time.sleep(0.5)
        os.killpg(process.pid, signal.SIGINT)
        process.wait(timeout=60)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    assert process.returncode != 0
    assert client.containers.list(filters={"name": "torchyard-cpu-"}, all=True) == []
