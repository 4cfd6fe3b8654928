"""A run stopped midway, as a runner stops a cancelled step or a job past its timeout: torchyard signalled
(SIGTERM, SIGHUP) removes its container and hands nothing unvetted to the reports folder the workflows
upload; torchyard killed outright leaves an empty reports folder, a container that ends on its own bound,
and leftovers the next run removes. The planted test links the runner's credentials into the reports and
sleeps (issue 57, route 2). A run whose tests stop or trace every process they can still ends at its deadline
with no torchyard left to stop it (issue 70, route 1)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import docker
import pytest
from docker.models.containers import Container

from torchyard.run.container import sweep_leftovers
from torchyard.run.staging import staging_root

pytestmark = pytest.mark.integration

REPO = Path(__file__).parents[2]

LINK_AND_SLEEP = """
import os, time

def test_link_and_sleep():
    os.symlink("{secret}", "/reports/runner-key")
    os.makedirs("/reports/deep", exist_ok=True)
    os.symlink("{secret}", "/reports/deep/runner-key")
    with open("/reports/parity.md", "w") as stream:
        stream.write("### torchyard parity: cpu on cpu, trusted run\\n")
    time.sleep(600)
"""

# A child process that runs the planted test as `torchyard test` would, with the CLI's signal handling.
CHILD = """
import json, sys
from pathlib import Path
import docker
from torchyard.cli import install_stop_handlers
from tests.integration.test_run import _run_with_mounted_test
install_stop_handlers()
args = json.loads(sys.argv[1])
try:
    _run_with_mounted_test(
        Path(args["tmp"]), args["env"], docker.from_env(), args["test"], trust="untrusted", timeout_s=args["timeout"]
    )
except KeyboardInterrupt:
    sys.exit(130)
"""


def _start(tmp_path: Path, machine_env: dict[str, str], secret: Path, timeout: int) -> subprocess.Popen[str]:
    payload = {
        "tmp": str(tmp_path),
        "env": machine_env,
        "test": LINK_AND_SLEEP.format(secret=secret),
        "timeout": timeout,
    }
    return subprocess.Popen(
        [sys.executable, "-c", CHILD, json.dumps(payload)], cwd=REPO, env=machine_env, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip


def _linked_stage(child: subprocess.Popen[str], seconds: float = 600) -> Path:
    """The staging folder once the planted test has made its links (the container is running)."""
    ends = time.monotonic() + seconds
    root = staging_root()
    while time.monotonic() < ends:
        assert child.poll() is None, child.stdout.read() if child.stdout else ""
        for stage in root.glob("torchyard-cpu-*") if root.is_dir() else ():
            if (stage / "runner-key").is_symlink() and (stage / "parity.md").exists():
                return stage
        time.sleep(0.5)
    pytest.fail("the planted test never ran")


def _container(client: docker.DockerClient, stage: Path) -> Container:
    return client.containers.get(stage.name)


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    path = tmp_path / "credentials_rsaparams"
    path.write_text("the runner's key\n")
    return path


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_a_signalled_run_removes_its_container_and_hands_nothing_unvetted_back(
    tmp_path: Path, machine_env: dict[str, str], client: docker.DockerClient, secret: Path, stop: signal.Signals
) -> None:
    child = _start(tmp_path, machine_env, secret, timeout=600)
    stage = _linked_stage(child)
    name = stage.name
    child.send_signal(stop)
    assert child.wait(timeout=120) == 130
    reports = tmp_path / "reports"
    assert list(reports.iterdir()) == []  # nothing reached the uploaded folder, links least of all
    assert not stage.exists()
    assert not client.containers.list(all=True, filters={"name": name})
    assert not client.volumes.list(filters={"label": "dev.torchyard.trust=untrusted", "name": name.rsplit("-", 1)[-1]})


def test_a_run_killed_outright_leaves_empty_reports_and_its_container_goes_with_the_next_sweep(
    tmp_path: Path, machine_env: dict[str, str], client: docker.DockerClient, secret: Path
) -> None:
    """SIGKILL: no cleanup runs in torchyard. The reports folder stays as the run's start emptied it. While the
    run lives, a sweep leaves its container alone; once it is gone (its staging folder no longer held), the next
    sweep removes the container at once, long before its deadline (issue 70: its own `timeout` runs as its
    tests' user, who can stop it), and the staging folder with it."""
    child = _start(tmp_path, machine_env, secret, timeout=300)
    stage = _linked_stage(child)
    name = stage.name
    sweep_leftovers(client, staging_root())
    assert client.containers.list(all=True, filters={"name": name})  # its run is alive: kept
    child.kill()
    child.wait(timeout=30)
    assert list((tmp_path / "reports").iterdir()) == []
    container = _container(client, stage)
    assert container.attrs["Path"] == "/opt/torchyard/warden" and container.status == "running"
    deadline = int(container.labels["dev.torchyard.ends-at"])
    run_id = name.rsplit("-", 1)[-1]
    untrusted = {"label": "dev.torchyard.trust=untrusted", "name": f"-untrusted-{run_id}"}
    assert client.volumes.list(filters=untrusted)  # its own cache, made for this untrusted run alone
    sweep_leftovers(client, staging_root(), now=deadline - 240)  # minutes before its deadline
    assert not client.containers.list(all=True, filters={"name": name})
    assert not stage.exists()
    assert not client.volumes.list(filters=untrusted)  # with its run: not left for `prune` (issue 70)
    assert secret.read_text() == "the runner's key\n"


# The tests stop what they can, then sleep: their parent (once the base's `timeout`, the only bound), every
# process but themselves (`kill(-1)`), the container's first process by signal and by ptrace (a stopped tracee
# never ends the run). What each attempt got is written where the host can read it while the container runs.
STOP_EVERYTHING = """
import ctypes, json, os, signal, time

def test_stop_everything():
    libc = ctypes.CDLL(None, use_errno=True)
    traced = libc.ptrace(16, 1, 0, 0)  # PTRACE_ATTACH
    seen = {"parent": os.getppid(), "ptrace": traced, "errno": ctypes.get_errno()}
    with open("/reports/attacks.json.part", "w") as stream:
        json.dump(seen, stream)
    os.rename("/reports/attacks.json.part", "/reports/attacks.json")
    for pid, signum in ((1, signal.SIGSTOP), (1, signal.SIGKILL), (os.getppid(), signal.SIGSTOP), (-1, signal.SIGSTOP)):
        try:
            os.kill(pid, signum)
        except (ProcessLookupError, PermissionError):  # the first is root's; kill(-1): none left but this one
            pass
    time.sleep(600)
"""

# A helper's attack on the first warden: the tests starve it (its scheduling was theirs to set while it ran as
# their user: SCHED_IDLE on one CPU kept a warden under CI's load 11 s past its deadline) and give it 3,000
# sleeping children and an endless stream of exiting ones (clone with CLONE_PARENT), so its reaping never ran dry
# and it never looked at its deadline again. What each scheduling attempt got is written for the host to read.
FLOOD = r"""#define _GNU_SOURCE
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <errno.h>
static char stk[65536] __attribute__((aligned(16)));
static int quick(void *a) { syscall(SYS_exit, 0); return 0; }
int main(int argc, char **argv) {
    int S = atoi(argv[1]), F = atoi(argv[2]);
    signal(SIGTERM, SIG_IGN); signal(SIGINT, SIG_IGN); signal(SIGHUP, SIG_IGN); signal(SIGQUIT, SIG_IGN);
    for (int i = 0; i < S; i++) {   /* sleepers: children of PID 1, head of its children list */
        long p = syscall(SYS_clone, CLONE_PARENT | SIGCHLD, 0, 0, 0, 0);
        if (p == 0) { for (;;) pause(); }
        if (p < 0) { fprintf(stderr, "sleeper %d failed\n", i); break; }
    }
    fprintf(stderr, "sleepers made\n");
    for (int i = 1; i < F; i++) if (syscall(SYS_clone, CLONE_PARENT | SIGCHLD, 0, 0, 0, 0) == 0) break;
    long n = 0, fails = 0; time_t last = time(0);
    for (;;) {   /* each clone: a zombie whose parent is PID 1, cheap (shared mm, vfork) */
        int p = clone(quick, stk + sizeof stk, CLONE_VM | CLONE_VFORK | CLONE_PARENT | SIGCHLD, 0);
        if (p < 0) { if (!fails++) perror("clone"); } else n++;
        if (time(0) != last) { last = time(0); fprintf(stderr, "f%d: %ld made %ld fails\n", getpid(), n, fails); }
    }
}
"""

STARVE_AND_FLOOD = (
    "import json, os, subprocess\n"
    f"FLOOD = {FLOOD!r}\n"
    """
def test_starve_and_flood():
    with open("/tmp/flood.c", "w") as stream:
        stream.write(FLOOD)
    subprocess.run(["gcc", "-O2", "-o", "/tmp/flood", "/tmp/flood.c"], check=True)
    tried = {}
    for name, attempt in (
        ("sched", lambda: os.sched_setscheduler(1, os.SCHED_IDLE, os.sched_param(0))),
        ("nice", lambda: os.setpriority(os.PRIO_PROCESS, 1, 19)),
        ("affinity", lambda: os.sched_setaffinity(1, {0})),
    ):
        try:
            attempt()
            tried[name] = "done"
        except PermissionError:
            tried[name] = "refused"
    with open("/reports/attacks.json.part", "w") as stream:
        json.dump({"scheduling": tried}, stream)
    os.rename("/reports/attacks.json.part", "/reports/attacks.json")
    os.execv("/tmp/flood", ["/tmp/flood", "3000", "2"])
"""
)


@pytest.mark.parametrize("planted", [STOP_EVERYTHING, STARVE_AND_FLOOD], ids=["stop-and-trace", "starve-and-flood"])
def test_a_run_whose_tests_stop_and_trace_everything_still_ends_at_its_deadline_with_no_torchyard_left(
    tmp_path: Path, machine_env: dict[str, str], client: docker.DockerClient, planted: str
) -> None:
    """Issue 70, route 1: a conftest stopped its parent, the container's only bound, and with torchyard killed
    outright (as a runner's clean-up does) the container outlived its deadline, holding the device. Now the
    image's warden is its first process, and another user's: the tests can neither stop, trace nor reschedule
    it, nor keep it reaping past its deadline, and it ends the container at its deadline, with no sweep and no
    torchyard."""
    payload = {"tmp": str(tmp_path), "env": machine_env, "test": planted, "timeout": 15}
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, json.dumps(payload)], cwd=REPO, env=machine_env, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip
    ends = time.monotonic() + 600
    root = staging_root()
    found: Path | None = None
    while found is None and time.monotonic() < ends:
        assert child.poll() is None, child.stdout.read() if child.stdout else ""
        found = next((stage for stage in root.glob("torchyard-cpu-*") if (stage / "attacks.json").exists()), None)
        time.sleep(0.2)
    assert found is not None, "the planted test never ran"
    container = _container(client, found)
    time.sleep(1)  # the stops land
    child.kill()  # no torchyard is left to stop the container
    child.wait(timeout=30)
    seen = json.loads((found / "attacks.json").read_text())
    assert seen.get("ptrace", -1) == -1 and seen.get("errno", 1) == 1, seen  # EPERM: root's, and not dumpable
    if planted == STARVE_AND_FLOOD:  # the warden is root's: its scheduling is not its tests' to set
        assert seen["scheduling"] == {"sched": "refused", "nice": "refused", "affinity": "refused"}, seen
    assert container.attrs["Path"] == "/opt/torchyard/warden"
    deadline = int(container.labels["dev.torchyard.ends-at"])
    try:
        while time.time() < deadline + 10:
            container.reload()
            if container.status != "running":
                break
            time.sleep(1)
        assert container.status != "running", f"still running {time.time() - deadline:.0f} s past its deadline"
        assert container.attrs["State"]["ExitCode"] == 124  # the warden's deadline ended it
    finally:
        sweep_leftovers(client, staging_root())
    assert not client.containers.list(all=True, filters={"name": found.name})


# A helper container (the wheel's fetch and build, the image check, the base's probe, the cache seed) run as
# torchyard runs it, with the CLI's signal handling; here the base's `sleep`, under the base's `timeout`.
HELPER_CHILD = """
import os, sys
from torchyard.cli import install_stop_handlers
from torchyard.seal import Helper, run_sealed
from torchyard.util import proc
install_stop_handlers()
name, image = sys.argv[1], sys.argv[2]
helper = Helper(name, "1000:1000", image, ("/bin/sleep", "600"), warden=False)
try:
    run_sealed(helper, docker_path="docker", runner=proc.run, env=dict(os.environ))
except KeyboardInterrupt:
    sys.exit(130)
"""


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_a_stopped_run_removes_the_helper_container_it_was_waiting_for(
    client: docker.DockerClient, local_base: str, stop: signal.Signals
) -> None:
    """Issue 70: `docker run`'s client, killed as torchyard stops, left a build backend's container running
    to its 30-minute bound beside the runner's next job. A stop now removes it before torchyard ends."""
    name = f"torchyard-helper-stop-{os.urandom(4).hex()}"
    child = subprocess.Popen(
        [sys.executable, "-c", HELPER_CHILD, name, local_base], cwd=REPO, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        ends = time.monotonic() + 120
        while not client.containers.list(filters={"name": name, "status": "running"}):
            assert child.poll() is None and time.monotonic() < ends, child.stdout.read() if child.stdout else ""
            time.sleep(0.2)
        child.send_signal(stop)
        assert child.wait(timeout=60) == 130
        assert not client.containers.list(all=True, filters={"name": name})
    finally:
        child.kill()
        for left in client.containers.list(all=True, filters={"name": name}):
            left.remove(force=True)
