"""Running entries on the real engine: a GPU entry on this CPU-only host fails before anything runs."""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import docker
import pytest

from tests.integration.conftest import PROJECT
from torchyard.cli import main
from torchyard.host.facts import gather_host_facts
from torchyard.image.layers import stack_of
from torchyard.image.plan import BuildOptions
from torchyard.matrix import parse_plan
from torchyard.matrix.machine import load_machine
from torchyard.pipeline import build_images
from torchyard.run.container import RunPlan, container_name, run_entry
from torchyard.run.scopes import cache_scope, seed_image
from torchyard.seal import Seal, run_user

pytestmark = pytest.mark.integration

REPO = Path(__file__).parents[2]


def test_cuda_entry_on_a_cpu_only_host_names_the_missing_device(capsys: pytest.CaptureFixture[str]) -> None:
    status = main(["test", "--matrix", str(REPO / "matrix.toml"), "cuda"])
    err = capsys.readouterr().err.splitlines()
    assert status == 3
    # This machine has no NVIDIA GPU on its PCI bus, and no NVIDIA container runtime: both are named.
    assert err[-1].startswith("torchyard: entry 'cuda' needs a cuda device: no NVIDIA GPU on this host (PCI vendor")
    assert "; no NVIDIA container runtime or CDI spec: install nvidia-container-toolkit" in err[-1]


def _run_with_mounted_test(
    tmp_path: Path,
    machine_env: dict[str, str],
    client: docker.DockerClient,
    test_text: str,
    extra: str = "",
    **run: Any,
) -> tuple[int, RunPlan]:
    """Run the cpu entry's image with one planted test file (bind-mounted: this machine's allow-list
    permits `--mount` for the test), selecting only that test. `run` sets the plan's trust (`trust`), its
    project (`project`, else one of this test's own), `seal`, `timeout_s` and the entry's name (`name`: another
    entry on the cpu entry's image, and so its stack)."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    planted = tmp_path / f"test_planted_{uuid.uuid4().hex[:6]}.py"
    planted.write_text(test_text)
    flags = f'{extra}"--mount", "type=bind,source={planted},target=/planted/test_planted.py"'
    text = (
        (REPO / "matrix.toml")
        .read_text()
        .replace('runs-on = ["ubuntu-24.04"]', f'runs-on = ["ubuntu-24.04"]\ndocker-run = [{flags}]')
    )
    entry = parse_plan(text, Path("matrix.toml"), allowed_docker_run={"--mount"}).entry("cpu")
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(REPO)
        (image,) = build_images(
            [entry],
            Path("lockfiles"),
            BuildOptions(),
            project=PROJECT,
            machine=load_machine(machine_env),
            env=machine_env,
        )
    entry = dataclasses.replace(entry, name=run.get("name", "cpu"))  # its image is the cpu entry's
    name = container_name(entry)
    project = run.get("project") or f"test{uuid.uuid4().hex[:8]}"
    stack = stack_of(client.images.get(image.tag).labels)
    plan = RunPlan(
        entry=entry.name,
        image=image.tag,
        name=name,
        reports=tmp_path / "reports",
        scope=cache_scope(entry, project, run.get("trust", "trusted"), name.rsplit("-", 1)[-1], stack),
        user=run_user(os.getuid(), os.getgid()),
        seal=run.get("seal") or Seal(load_machine(machine_env).limits, "4g"),
        timeout_s=run.get("timeout_s", 0),
        seed_image=seed_image(entry, load_machine(machine_env).base_overrides),  # as plan_run sets it
    )
    status = run_entry(
        entry, plan, client=client, docker_path="/usr/bin/docker", host=gather_host_facts(client),
        pytest_args=["-q", "/planted/test_planted.py", "-m", "project", "--torchyard-suites="],
    )  # fmt: skip
    return status, plan


def test_a_container_killed_for_memory_says_so(
    tmp_path: Path, machine_env: dict[str, str], client: docker.DockerClient, capsys: pytest.CaptureFixture[str]
) -> None:
    # A test that allocates anonymous memory far over the limit: the kernel must kill it (a limit that only
    # squeezes torch's file-backed pages would thrash instead, never killing anything).
    hog = 'def test_hog():\n    block = b"x" * (4 << 30)  # written, so every page is resident\n    assert block\n'
    status, plan = _run_with_mounted_test(
        tmp_path, machine_env, client, hog, extra='"--memory", "768m", "--memory-swap", "768m", '
    )
    assert status == 137
    assert "the container for entry 'cpu' was killed: out of memory" in capsys.readouterr().err
    assert not client.containers.list(all=True, filters={"name": plan.name})


def test_a_failing_test_gives_its_status_and_whole_reports(
    tmp_path: Path, machine_env: dict[str, str], client: docker.DockerClient, capfd: pytest.CaptureFixture[str]
) -> None:
    """The in-image entry point ends without the interpreter's teardown: the status, the last lines of
    output and the reports must still all be there."""
    planted = "def test_passes():\n    assert True\n\n\ndef test_fails():\n    assert 1 == 2\n"
    status, plan = _run_with_mounted_test(tmp_path, machine_env, client, planted)
    out = capfd.readouterr().out
    assert status == 1, out
    assert out.strip().splitlines()[-1].startswith("1 failed, 1 passed"), out[-2000:]  # pytest's last line
    junit = (plan.reports / "junit.xml").read_text()
    assert 'failures="1"' in junit and 'name="test_fails"' in junit and 'name="test_passes"' in junit


def test_inductors_precompiled_headers_land_in_the_entrys_volume(
    tmp_path: Path, machine_env: dict[str, str], client: docker.DockerClient
) -> None:
    """inductor puts its precompiled headers in `<temp>/torchinductor_<user>`, not in its cache folder: in
    a container that is the private /tmp, gone after each run, unless the volume is mounted there too."""
    marker = f"planted-{uuid.uuid4().hex[:8]}"
    planted = (
        "from pathlib import Path\n"
        "from torch._inductor.runtime.cache_dir_utils import default_cache_dir\n\n\n"
        "def test_write_where_the_headers_go():\n"
        f"    (Path(default_cache_dir()) / '{marker}').write_text('x')\n"
    )
    status, plan = _run_with_mounted_test(tmp_path, machine_env, client, planted)
    assert status == 0
    listing = client.containers.run(
        "torchyard/base:bookworm", ["ls", "/volume"], remove=True,
        mounts=[docker.types.Mount("/volume", plan.scope.volume, type="volume")],
    )  # fmt: skip
    assert marker in bytes(listing).decode().split()


HOSTILE = """
import errno
import os
import socket
import subprocess
import time
from pathlib import Path

import pytest


def test_no_network():
    # Only the loopback interface: a connect test alone passes on any host that cannot reach pypi.org.
    assert sorted(os.listdir("/sys/class/net")) == ["lo"]
    with pytest.raises(OSError):
        socket.create_connection(("pypi.org", 443), timeout=10)


def test_setuid_gives_no_privilege():
    # su is setuid root and waits for a password: while it waits, its effective uid says whether the
    # setuid bit was honoured (it is 0 in a container without no-new-privileges).
    waiting = subprocess.Popen(["su", "root"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        for _ in range(500):  # until the child has become su (a bounded count, not a deadline)
            try:
                if os.readlink(f"/proc/{waiting.pid}/exe").endswith("/su"):
                    break
            except OSError:
                pass
            time.sleep(0.01)
        status = Path(f"/proc/{waiting.pid}/status").read_text()
        assert os.readlink(f"/proc/{waiting.pid}/exe").endswith("/su")
        uids = next(line for line in status.splitlines() if line.startswith("Uid:")).split()[1:]
        assert uids == [str(os.getuid())] * 4
    finally:
        waiting.kill()


def test_no_capabilities_at_all():
    status = Path("/proc/self/status").read_text()
    assert "CapBnd:\t0000000000000000" in status and "NoNewPrivs:\t1" in status


def test_root_is_read_only_and_scratch_is_private():
    for path in ("/etc/planted", "/workspace/planted", "/opt/torchyard/venv/planted"):
        with pytest.raises(OSError) as caught:
            Path(path).write_text("x")
        assert caught.value.errno == errno.EROFS
    Path("/tmp/scratch").write_text("ok")
    (Path.home() / "scratch").write_text("ok")


def test_a_link_out_of_the_reports_is_planted():
    Path("/reports/escape").symlink_to("/etc/hostname")
    # a special file whose name would write to the runner's terminal and log, as the host names what it removes
    os.mkfifo("/reports/\\x1b]0;pwned\\x07\\ntorchyard: trusted run")
"""


def test_the_test_container_is_sealed(
    tmp_path: Path, machine_env: dict[str, str], client: docker.DockerClient, capsys: pytest.CaptureFixture[str]
) -> None:
    """Hostile tests inside a real container: no network, no privilege through setuid, no capabilities,
    a read-only root, and a link planted in the reports that the caller removes, never follows (.ci/run runs
    as root, where following it could hand a host file over)."""
    status, plan = _run_with_mounted_test(tmp_path, machine_env, client, HOSTILE)
    assert status == 0, capsys.readouterr()
    err = capsys.readouterr().err
    assert "removed escape from the reports" in err
    assert "removed \\x1b]0;pwned\\x07\\ntorchyard: trusted run from the reports" in err and "\x1b" not in err
    assert not (plan.reports / "escape").is_symlink() and Path("/etc/hostname").stat().st_uid == 0
    assert (plan.reports / "junit.xml").stat().st_uid == os.getuid()  # handed back to the caller


def test_ctrl_c_leaves_no_container(machine_env: dict[str, str], client: docker.DockerClient, tmp_path: Path) -> None:
    """SIGINT to the whole `torchyard test` process group, as a terminal's Ctrl-C sends it."""
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(REPO)
        build_images(
            [parse_plan((REPO / "matrix.toml").read_text(), Path("m")).entry("cpu")],
            Path("lockfiles"),
            BuildOptions(),
            project=PROJECT,
            machine=load_machine(machine_env),
            env=machine_env,
        )
    log = (tmp_path / "stderr.log").open("w")  # a file, not a pipe: the command never blocks writing to it
    # SIGINT as a terminal's foreground job has it. A job started in the background of a non-interactive shell
    # (`nohup .ci/run &`) inherits it ignored, and Python then never raises KeyboardInterrupt: a Ctrl-C that lands
    # before the container has started would reach nothing. A handler, unlike an ignore, is not inherited.
    inherited = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        process = subprocess.Popen(
            [sys.executable, "-m", "torchyard", "test", "cpu", "-q"],
            # the project the image above was built for, so the command finds it rather than building its own
            cwd=REPO, env={**machine_env, "GITHUB_REPOSITORY": "torchyard-tests/integration"},
            start_new_session=True, stdout=subprocess.DEVNULL, stderr=log, text=True,
        )  # fmt: skip
    finally:
        signal.signal(signal.SIGINT, inherited)
    try:
        # Until the run's container exists or the command has ended without one: no clock decides. The name filter is
        # a regex (the source-only rebuild's helpers, `-fetch` and the like, come and go first); sparse lists once,
        # with no inspect per container that one removed in between would fail with 404.
        while not client.containers.list(filters={"name": "^/torchyard-cpu-[0-9a-f]{8}$"}, all=True, sparse=True):
            assert process.poll() is None, (tmp_path / "stderr.log").read_text()[-2000:]
            time.sleep(0.5)
        os.killpg(process.pid, signal.SIGINT)
        process.wait()
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
        log.close()
    assert process.returncode != 0
    assert client.containers.list(filters={"name": "torchyard-cpu-"}, all=True, sparse=True) == []
