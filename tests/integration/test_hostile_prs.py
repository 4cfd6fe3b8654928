"""Hostile pull requests, one per route a pull request could take to the host, a later trusted run or a
secret. Each runs as an untrusted run through the real command line (or the real engine, where the route is a
container's), on a checkout the pull request wrote, on a runner whose machine.toml allows `--mount` (as a
runner with datasets would); then the host, the trusted scope and the secrets are checked untouched, and a
trusted run follows (the last test of this module, and test_trust.py's)."""

from __future__ import annotations

import json
import os
import py_compile
import shutil
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path

import docker
import pytest

from torchyard.matrix.machine import Limits
from torchyard.run.staging import staging_root
from torchyard.seal import Seal

from .conftest import REPO, copy_tree
from .host_audit import allow_list, loaded_code, read_execs, read_opens, traced, violations
from .test_run import _run_with_mounted_test

pytestmark = pytest.mark.integration

SECRET = f"hostile-test-secret-{uuid.uuid4().hex}"
GPU_LABELS = 'runs-on = ["self-hosted", "linux", "x64", "gpu", "cuda"]'
CPU_LABELS = 'runs-on = ["ubuntu-24.04"]'


class Runner:
    """A self-hosted runner's view: a victim folder and a secret on the host, the pull request's checkout,
    the default branch's matrix.toml beside it, and a machine.toml that allows `--mount`."""

    def __init__(self, root: Path, machine_env: dict[str, str]) -> None:
        self.root = root
        self.audits: list[Path] = []
        self.victim = root / "victim"
        self.victim.mkdir(parents=True)
        (self.victim / "keep").write_text("the host's own\n")
        self.secret = root / "home" / ".ssh" / "id_rsa"
        self.secret.parent.mkdir(parents=True)
        self.secret.write_text(SECRET + "\n")
        self.checkout = copy_tree(root / "checkout")
        self.trusted = root / "trusted-matrix.toml"
        self.trusted.write_text((REPO / "matrix.toml").read_text())
        machine = root / "machine.toml"
        machine.write_text('[allow]\ndocker-run = ["--mount"]\n')
        self.env = {
            **machine_env,
            "TORCHYARD_TRUST": "untrusted",
            "TORCHYARD_TRUSTED_MATRIX": str(self.trusted),
            "TORCHYARD_MACHINE_FILE": str(machine),
            "TORCHYARD_REGISTRY_PASSWORD": SECRET,
        }

    def edit_matrix(self, old: str, new: str) -> None:
        path = self.checkout / "matrix.toml"
        text = path.read_text()
        assert old in text, old
        path.write_text(text.replace(old, new, 1))

    def torchyard(self, *args: str) -> subprocess.CompletedProcess[str]:
        """The command as the runner runs it, under the host audit (`host_audit`): what it starts is checked
        in `assert_untouched`."""
        self.audits.append(self.root / f"execve-{len(self.audits)}.log")
        return subprocess.run(
            traced([sys.executable, "-P", "-m", "torchyard", *args], self.audits[-1]),
            cwd=self.checkout, env=self.env, capture_output=True, text=True, timeout=600, check=False,
        )  # fmt: skip

    def audit(self) -> list[str]:
        """What the host started that it may not, over every command this runner ran."""
        hostile = (self.checkout, staging_root(), self.root / "reports")
        return [
            problem
            for log in self.audits
            for problem in [
                *violations(read_execs(log), allow_list(), hostile),
                *loaded_code(read_opens(log, self.checkout), hostile),
            ]
        ]

    def victim_state(self) -> dict[str, bytes]:
        return {item.name: item.read_bytes() for item in sorted(self.victim.iterdir())}

    def assert_untouched(self, result: subprocess.CompletedProcess[str], before: dict[str, bytes]) -> None:
        assert self.victim_state() == before and before["keep"] == b"the host's own\n"
        assert SECRET not in result.stdout + result.stderr
        assert "Traceback" not in result.stderr
        assert self.audit() == []


@pytest.fixture
def runner(tmp_path: Path, machine_env: dict[str, str]) -> Runner:
    return Runner(tmp_path, machine_env)


def _moved_runner(runner: Runner) -> None:
    runner.edit_matrix(GPU_LABELS, 'runs-on = ["linux", "x64", "gpu", "cuda"]')


def _reports_link(runner: Runner) -> None:
    (runner.checkout / "reports").symlink_to(runner.victim)


def _entry_reports_link(runner: Runner) -> None:
    (runner.checkout / "reports").mkdir()
    (runner.checkout / "reports" / "cpu").symlink_to(runner.victim)


def _linked_lockfile(runner: Runner) -> None:
    (runner.checkout / "lockfiles" / "cpu.txt").unlink()
    (runner.checkout / "lockfiles" / "cpu.txt").symlink_to(runner.secret)


def _mount_the_host(runner: Runner) -> None:
    runner.edit_matrix(CPU_LABELS, f'{CPU_LABELS}\ndocker-run = ["--mount", "type=bind,source=/,target=/host"]')


def _trust_label(runner: Runner) -> None:
    runner.edit_matrix(CPU_LABELS, f'{CPU_LABELS}\ndocker-run = ["--env", "TORCHYARD_TRUST=trusted"]')


def _trust_by_docker_label(runner: Runner) -> None:
    runner.edit_matrix(CPU_LABELS, f'{CPU_LABELS}\ndocker-run = ["--label", "dev.torchyard.trust=trusted"]')


def _open_namespaces(runner: Runner) -> None:
    runner.edit_matrix(CPU_LABELS, f'{CPU_LABELS}\ndocker-run = ["--ipc=host"]')


def _project_outside(value: str) -> Callable[[Runner], None]:
    def plant(runner: Runner) -> None:
        (runner.victim / "pyproject.toml").write_text('[project]\nname = "victim"\nversion = "1"\n')
        runner.edit_matrix('name = "cpu"\n', f'name = "cpu"\nproject = "{value}"\n')

    return plant


def _base_moved(runner: Runner) -> None:
    text = (runner.checkout / "matrix.toml").read_text()
    old = text[text.index('base-image = "', text.index("[accelerators.cpu]")) :].split("\n", 1)[0]
    runner.edit_matrix(old, 'base-image = "evil/base@sha256:' + "0" * 64 + '"')


def _image_in_docker_run(runner: Runner) -> None:
    runner.edit_matrix(CPU_LABELS, f'{CPU_LABELS}\ndocker-run = ["--cpus", "1", "attacker/img:1"]')


def _tests_outside(runner: Runner) -> None:
    runner.edit_matrix('name = "cpu"\n', 'name = "cpu"\nproject = "."\ntests = ["../victim"]\n')


def _linked_matrix(runner: Runner) -> None:
    (runner.checkout / "matrix.toml").unlink()
    (runner.checkout / "matrix.toml").symlink_to(runner.secret)


def _linked_run_lock(runner: Runner) -> None:
    (runner.checkout / "reports").mkdir()
    (runner.checkout / "reports" / ".cpu.lock").symlink_to(runner.victim / "keep")


def _no_trusted_matrix(runner: Runner) -> None:
    del runner.env["TORCHYARD_TRUSTED_MATRIX"]


def _option_requirements(runner: Runner) -> None:
    """`[build-system] requires` as uv options: an index of the pull request's, an sdist built with network."""
    project = runner.checkout / "pr"
    project.mkdir()
    (project / "pyproject.toml").write_text(
        '[project]\nname = "pr"\nversion = "1"\n[build-system]\n'
        'requires = ["--no-binary", "evilb", "--find-links", "http://127.0.0.1:9/", "evilb"]\n'
        'build-backend = "evilb"\n'
    )
    runner.edit_matrix('name = "cpu"\n', 'name = "cpu"\nproject = "pr"\n')


def _git_dir_project(runner: Runner) -> None:
    """Issue 57, route 1: a folder git takes for a repository (HEAD, objects/, refs/, a config whose
    core.fsmonitor runs a command), committed as plain files and named as the project: the host's git must
    never run there. A case module it lacks stops the build in one line, after the host read its files."""
    project = runner.checkout / "sub"
    subprocess.run(["git", "init", "--quiet", "--bare", str(project)], check=True, capture_output=True)
    with (project / "config").open("a") as config:
        config.write(f'[core]\n\tbare = false\n\tworktree = ..\n\tfsmonitor = "touch {runner.victim}/pwned; false"\n')
    (project / "pkg").mkdir()
    (project / "pkg" / "__init__.py").write_text("")
    runner.edit_matrix('name = "cpu"\n', 'name = "cpu"\nproject = { source = "sub" }\ncases = ["pkg.missing"]\n')
    # checked out as a runner checks a pull request out: a repository whose commit holds those files
    identity = ("-c", "user.email=pr@example.com", "-c", "user.name=pr")
    for args in (("init", "--quiet"), ("add", "--force", "."), (*identity, "commit", "--quiet", "-m", "pr")):
        subprocess.run(["git", "-C", str(runner.checkout), *args], check=True, capture_output=True)


# (name, the pull request's change, the command it runs, what the one line says)
TEST_CORPUS = [
    (
        "runner-labels",
        _moved_runner,
        ("matrix", "--github", "--runners", "hosted"),
        "this untrusted run changes runs-on",
    ),
    ("reports-link", _reports_link, ("test", "--entry", "cpu"), "is a symbolic link (committed?)"),
    ("entry-reports-link", _entry_reports_link, ("test", "--entry", "cpu"), "is a symbolic link (committed?)"),
    ("linked-lockfile", _linked_lockfile, ("test", "--entry", "cpu"), "is a symbolic link"),
    ("mount-the-host", _mount_the_host, ("test", "--entry", "cpu"), "an untrusted run takes '--mount'"),
    ("trust-variable", _trust_label, ("test", "--entry", "cpu"), "TORCHYARD_* variables are torchyard's own"),
    ("trust-label", _trust_by_docker_label, ("test", "--entry", "cpu"), "labels under dev.torchyard. are torchyard's"),
    ("host-namespace", _open_namespaces, ("test", "--entry", "cpu"), '"--ipc=host" can give up the container'),
    ("project-root", _project_outside("/"), ("test", "--entry", "cpu"), "expected a path inside the project's"),
    ("project-parent", _project_outside("../victim"), ("build", "cpu"), "expected a path inside the project's"),
    ("base-moved", _base_moved, ("build", "cpu"), "this untrusted run changes base-image"),
    ("image-in-docker-run", _image_in_docker_run, ("test", "--entry", "cpu"), "is neither a flag nor a flag's value"),
    ("tests-outside", _tests_outside, ("test", "--entry", "cpu"), "expected a path inside the project's"),
    ("linked-matrix", _linked_matrix, ("test", "--entry", "cpu"), "is a symbolic link"),
    ("linked-run-lock", _linked_run_lock, ("test", "--entry", "cpu"), "cannot hold the run's lock"),
    ("no-trusted-matrix", _no_trusted_matrix, ("test", "--entry", "cpu"), "set TORCHYARD_TRUSTED_MATRIX"),
    ("push-untrusted", lambda runner: None, ("build", "cpu", "--push"), "an untrusted run does not push images"),
    ("option-requirements", _option_requirements, ("build", "cpu"), "PEP 508"),
    ("git-dir-project", _git_dir_project, ("build", "cpu"), "cases module 'pkg.missing' is not in the project"),
]


@pytest.mark.parametrize(
    ("change", "args", "line"), [case[1:] for case in TEST_CORPUS], ids=[case[0] for case in TEST_CORPUS]
)
def test_a_hostile_pull_request_is_refused_in_one_line_before_anything_runs(
    runner: Runner, client: docker.DockerClient, change: Callable[[Runner], None], args: tuple[str, ...], line: str
) -> None:
    containers = {container.id for container in client.containers.list(all=True)}
    change(runner)
    before = runner.victim_state()  # what the pull request's change put there (a pyproject.toml, say)
    result = runner.torchyard(*args)
    assert result.returncode in (1, 2), result.stderr
    last = result.stderr.strip().splitlines()[-1]  # the commands it ran come first, as every command prints
    assert last.startswith("torchyard: ") and line in last, result.stderr
    runner.assert_untouched(result, before)
    assert {container.id for container in client.containers.list(all=True)} <= containers  # nothing started
    # The same command from the trusted configuration is not refused for the same reason.
    if args[0] == "matrix":
        runner.edit_matrix('runs-on = ["linux", "x64", "gpu", "cuda"]', GPU_LABELS)
        trusted = runner.torchyard(*args)
        assert trusted.returncode == 0 and '"name":"cuda"' not in trusted.stdout, trusted.stderr


FORGE = """
import atexit, json, os

def _forge():
    # after torchyard's plugin wrote the reports: what a conftest's last hook or an atexit handler can do
    path = "/reports/env.json"
    data = json.load(open(path)) if os.path.exists(path) else {}
    data.update(trust="trusted", entry="forged")
    json.dump(data, open(path, "w"))
    with open("/reports/parity.md", "a") as stream:
        stream.write("> **torchyard (host)**: entry `cpu`, image `x`, **trusted** run\\n")

atexit.register(_forge)

def test_forge():
    pass
"""


def test_reports_rewritten_after_the_plugin_are_stamped_by_the_host(
    tmp_path: Path, machine_env: dict[str, str], client: docker.DockerClient
) -> None:
    status, plan = _run_with_mounted_test(tmp_path, machine_env, client, FORGE, trust="untrusted")
    assert status == 0
    environment = json.loads((plan.reports / "env.json").read_text())
    assert (environment["trust"], environment["entry"], environment["image"]) == ("untrusted", "cpu", plan.image)
    lines = (plan.reports / "parity.md").read_text().splitlines()
    assert lines[0].endswith("**untrusted** run")
    assert [line for line in lines if "**trusted** run" in line] == []


def test_reports_past_the_bound_stop_the_run_while_it_writes(
    tmp_path: Path, machine_env: dict[str, str], client: docker.DockerClient
) -> None:
    """A test that writes without end: stopped at the bound, not at its timeout, and the folder emptied."""
    flood = (
        "import time\n\n"
        "def test_flood():\n"
        "    with open('/reports/flood', 'wb') as stream:\n"
        "        while True:\n"
        "            stream.write(b'x' * (1 << 20))\n"
        "            stream.flush()\n"
        "            time.sleep(0.05)\n"
    )
    from torchyard.run.handback import HandBackError

    seal = Seal(Limits(reports="8m"), "2g")
    with pytest.raises(HandBackError, match=r"more than this machine's 8 MiB of reports .*stopped while it wrote"):
        _run_with_mounted_test(tmp_path, machine_env, client, flood, seal=seal, timeout_s=300)
    assert not list((tmp_path / "reports").iterdir())


def test_an_untrusted_runs_cache_past_its_bound_stops_the_run_while_it_writes(
    tmp_path: Path, machine_env: dict[str, str], client: docker.DockerClient
) -> None:
    """Its own cache volume is counted on this (root) runner while the run writes, and a writer that ignores
    SIGTERM is killed all the same."""
    flood = (
        "import signal, time\n\n"
        "def test_flood():\n"
        "    signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "    with open('/cache/inductor/flood', 'wb') as stream:\n"
        "        while True:\n"
        "            stream.write(b'x' * (1 << 20))\n"
        "            stream.flush()\n"
        "            time.sleep(0.02)\n"
    )
    from torchyard.run.handback import HandBackError

    seal = Seal(Limits(cache="16m"), "2g")
    with pytest.raises(HandBackError, match=r"more than this machine's 16 MiB of cache .*stopped while it wrote"):
        _run_with_mounted_test(tmp_path, machine_env, client, flood, seal=seal, timeout_s=300, trust="untrusted")
    assert not client.volumes.list(filters={"label": "dev.torchyard.trust=untrusted"})


def test_a_trusted_run_after_the_hostile_ones_is_clean(
    tmp_path: Path, machine_env: dict[str, str], client: docker.DockerClient
) -> None:
    """What the hostile runs leave: no container, no untrusted volume, and a trusted run that passes."""
    assert not client.containers.list(all=True, filters={"label": "dev.torchyard.trust=untrusted"})
    assert not client.volumes.list(filters={"label": "dev.torchyard.trust=untrusted"})
    check = "import os\n\ndef test_clean():\n    assert os.environ['TORCHYARD_TRUST'] == 'trusted'\n"
    status, plan = _run_with_mounted_test(tmp_path, machine_env, client, check)
    assert status == 0
    assert json.loads((plan.reports / "env.json").read_text())["trust"] == "trusted"
    assert plan.reports.stat().st_uid == os.getuid()


def test_the_host_audit_names_what_the_host_should_never_start(tmp_path: Path) -> None:
    """The audit can fail: a program run from the checkout, one off the list, git started outside its seam
    (discovering a repository from a folder the pull request chose), a program started by descriptor
    (`execveat`), torchyard started so that the checkout comes first on sys.path (a committed `torchyard/`
    shadows it), and a module of the checkout imported into a host process (from its source, or a `.pyc` beside
    none) are each named."""
    checkout = tmp_path / "checkout"
    (checkout / "torchyard").mkdir(parents=True)
    (checkout / "hook.sh").write_text("#!/bin/sh\ntrue\n")
    (checkout / "hook.sh").chmod(0o755)
    (checkout / "torchyard" / "__init__.py").write_text("")
    (checkout / "torchyard" / "__main__.py").write_text("print('the pull request runs on the host')\n")
    log = tmp_path / "execve.log"
    shutil.copy("/bin/true", checkout / "tool")  # a program of the checkout's, started by its descriptor
    sourceless = f"import sys; sys.path.insert(0, {str(checkout)!r}); import sourceless"
    by_descriptor = f"import os; os.execve(os.open({str(checkout / 'tool')!r}, os.O_RDONLY), ['hook-by-fd'], {{}})"
    script = (
        "import subprocess, sys\n"
        f"subprocess.run([{str(checkout / 'hook.sh')!r}])\n"
        "subprocess.run(['sh', '-c', 'true'])\n"
        f"subprocess.run([sys.executable, {str(checkout / 'setup.py')!r}], capture_output=True)\n"
        f"subprocess.run(['git', 'ls-files'], cwd={str(checkout)!r}, capture_output=True)\n"
        f"subprocess.run([sys.executable, '-c', {by_descriptor!r}])\n"
        f"subprocess.run([sys.executable, '-m', 'torchyard', '--help'], cwd={str(checkout)!r}, capture_output=True)\n"
        f"subprocess.run([sys.executable, '-c', {sourceless!r}])\n"
    )
    source = tmp_path / "sourceless.py"  # compiled beside no source: Python imports the `.pyc` itself
    source.write_text("")
    py_compile.compile(str(source), cfile=str(checkout / "sourceless.pyc"), doraise=True)
    subprocess.run(traced([sys.executable, "-c", script], log), check=True)
    problems = violations(read_execs(log), allow_list(), [checkout])
    assert any("hook-by-fd" in problem and "allow-list" in problem for problem in problems), problems
    assert any("'-m', 'torchyard'" in problem.replace('"', "'") for problem in problems), problems
    imported = loaded_code(read_opens(log, tmp_path), [checkout])
    assert any("/torchyard/__pycache__/" in problem for problem in imported), imported
    assert any("/sourceless.pyc: opened as code" in problem for problem in imported), imported
    assert any("hook.sh" in problem and "a folder the pull request writes" in problem for problem in problems)
    assert any(problem.startswith(("/bin/sh", "/usr/bin/sh")) and "allow-list" in problem for problem in problems)
    assert any("git" in problem and "started without --git-dir=" in problem for problem in problems)
    assert any("setup.py" in problem and "arguments its entry does not allow" in problem for problem in problems)
