"""An attacker's run, then a trusted run, on the real engine: nothing the first writes reaches the second,
the host or the reports; and every run is bounded (time, scratch space, what it hands back)."""

from __future__ import annotations

import re
import uuid
from pathlib import Path

import docker
import pytest

from torchyard.matrix.machine import Limits
from torchyard.seal import Seal

from .test_run import _run_with_mounted_test

pytestmark = pytest.mark.integration

# What a pull request's test would leave for the next run: a pickle beside inductor's cached graphs, a
# pickled weight in a lowered program, a pattern-store entry with code in a name, a forged replay record.
PLANTS = (
    "0/fxgraph/ab/abcdef/planted.pickle",
    "artifacts/0123.pt2",
    "artifacts/0456.patterns.json",
    "results/record.json",
)
ATTACKER = f"""
from pathlib import Path

def test_plant():
    cache = Path("/cache/inductor")
    assert (cache / "trusted-marker").read_text() == "from a trusted run"  # the copy it started from
    for name in {PLANTS!r}:
        (cache / name).parent.mkdir(parents=True, exist_ok=True)
        (cache / name).write_text("planted by an untrusted run")
    (cache / "trusted-marker").write_text("overwritten by an untrusted run")
"""
TRUSTED_FIRST = """
from pathlib import Path

def test_warm_the_cache():
    (Path("/cache/inductor") / "trusted-marker").write_text("from a trusted run")
"""
TRUSTED_AFTER = f"""
from pathlib import Path

def test_nothing_planted():
    cache = Path("/cache/inductor")
    assert (cache / "trusted-marker").read_text() == "from a trusted run"
    assert not [name for name in {PLANTS!r} if (cache / name).exists()]
"""


def _volumes(client: docker.DockerClient, project: str) -> dict[str, dict[str, str]]:
    found = client.volumes.list(filters={"label": f"dev.torchyard.scope={project}"})
    return {str(volume.name): dict(volume.attrs.get("Labels") or {}) for volume in found}


def test_an_untrusted_run_starts_warm_and_reaches_no_later_trusted_run(
    tmp_path: Path, machine_env: dict[str, str], client: docker.DockerClient, capsys: pytest.CaptureFixture[str]
) -> None:
    project = f"test{uuid.uuid4().hex[:8]}"
    trusted_volume = f"torchyard-cache-{project}-cpu"
    try:
        status, _ = _run_with_mounted_test(tmp_path / "1", machine_env, client, TRUSTED_FIRST, project=project)
        assert status == 0
        status, plan = _run_with_mounted_test(
            tmp_path / "2", machine_env, client, ATTACKER, project=project, trust="untrusted"
        )
        assert status == 0, capsys.readouterr()
        assert f"the cache starts as a copy of the trusted scope {trusted_volume}" in capsys.readouterr().err
        # Its own volume is gone; the trusted scope is the only one left, labelled as such.
        assert _volumes(client, project) == {
            trusted_volume: {
                "dev.torchyard.entry": "cpu",
                "dev.torchyard.scope": project,
                "dev.torchyard.trust": "trusted",
                "dev.torchyard.stack": plan.scope.stack,
            }
        }
        assert re.fullmatch(r"[0-9a-f]{64}", plan.scope.stack)
        assert plan.scope.volume != trusted_volume
        status, _ = _run_with_mounted_test(tmp_path / "3", machine_env, client, TRUSTED_AFTER, project=project)
        assert status == 0, capsys.readouterr()
    finally:
        for name in _volumes(client, project):
            client.volumes.get(name).remove(force=True)


SIBLING_FIRST = """
from pathlib import Path

def test_warm_from_the_cpu_entry():
    cache = Path("/cache/inductor")
    assert (cache / "trusted-marker").read_text() == "from a trusted run"
    (cache / "trusted-marker").write_text("from the sibling")
"""
SIBLING_AGAIN = """
from pathlib import Path

def test_its_own_cache():
    assert (Path("/cache/inductor") / "trusted-marker").read_text() == "from the sibling"
"""
CPU_AGAIN = """
from pathlib import Path

def test_the_cpu_entrys_own_cache():
    assert (Path("/cache/inductor") / "trusted-marker").read_text() == "from a trusted run"
"""
COLD = "def test_cold():\n    import os\n    assert os.listdir('/cache/inductor') == []\n"


def test_an_entrys_first_run_starts_from_a_trusted_cache_of_the_same_stack_and_project(
    tmp_path: Path, machine_env: dict[str, str], client: docker.DockerClient, capsys: pytest.CaptureFixture[str]
) -> None:
    project, other = (f"test{uuid.uuid4().hex[:8]}" for _ in range(2))

    def run(step: str, text: str, **options: str) -> str:
        status, _ = _run_with_mounted_test(tmp_path / step, machine_env, client, text, **options)
        err = capsys.readouterr().err
        assert status == 0, err
        return err

    try:
        _, plan = _run_with_mounted_test(tmp_path / "1", machine_env, client, TRUSTED_FIRST, project=project)
        # A volume a killed untrusted run left, on the same stack, sorting first: never a trusted run's start.
        labels = {"dev.torchyard.scope": project, "dev.torchyard.stack": plan.scope.stack}
        client.volumes.create(f"torchyard-cache-{project}-a-untrusted-1", labels=labels)
        client.volumes.create(f"torchyard-cache-{project}-b", labels={**labels, "dev.torchyard.trust": "untrusted"})
        # Another entry on the same image: its new cache starts as a copy of the cpu entry's.
        err = run("2", SIBLING_FIRST, project=project, name="cpu-bf16")
        assert f"a new cache starts as a copy of the same stack's torchyard-cache-{project}-cpu" in err
        # Each cache is its own from then on: what one writes the other never reads, and nothing is copied again.
        run("3", CPU_AGAIN, project=project)
        assert "a new cache starts" not in run("4", SIBLING_AGAIN, project=project, name="cpu-bf16")
        # Another project's entry on the same stack starts cold.
        run("5", COLD, project=other, name="cpu-bf16")
    finally:
        for name in {**_volumes(client, project), **_volumes(client, other)}:
            client.volumes.get(name).remove(force=True)


PROOFS_ALONE = """
from pathlib import Path

def test_the_proofs_alone():
    cache = Path("/cache/inductor")
    assert (cache / "self-tests" / "kept.json").read_text() == "another stack's proof"
    assert not (cache / "other-stack-marker").exists()
"""


def test_a_new_cache_on_another_stack_starts_with_the_projects_proofs_alone(
    tmp_path: Path,
    machine_env: dict[str, str],
    client: docker.DockerClient,
    local_base: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A project's entry on a new stack (a lock that adds a model's dependency) starts with the self-tests' proofs
    of its trusted sibling on another stack, which name the versions they exercise, and nothing else of it; a
    sibling with no proof leaves the new cache empty, and says so."""
    project, bare = (f"test{uuid.uuid4().hex[:8]}" for _ in range(2))
    for owner, fill in (
        (project, 'mkdir /c/self-tests && echo -n "another stack\'s proof" > /c/self-tests/kept.json; '),
        (bare, ""),
    ):
        other = f"torchyard-cache-{owner}-other"
        labels = {"dev.torchyard.scope": owner, "dev.torchyard.trust": "trusted", "dev.torchyard.entry": "other"}
        client.volumes.create(other, labels={**labels, "dev.torchyard.stack": "0" * 64})
        command = ["sh", "-c", f"{fill}touch /c/other-stack-marker"]
        client.containers.run(local_base, command, volumes={other: {"bind": "/c"}}, remove=True, entrypoint=[])
    try:
        status, _ = _run_with_mounted_test(tmp_path / "1", machine_env, client, PROOFS_ALONE, project=project)
        err = capsys.readouterr().err
        assert status == 0, err
        assert f"a new cache starts with the self-tests' proofs of torchyard-cache-{project}-other" in err
        status, _ = _run_with_mounted_test(tmp_path / "2", machine_env, client, COLD, project=bare)
        err = capsys.readouterr().err
        assert status == 0, err
        assert f"no self-tests' proof to start from in torchyard-cache-{bare}-other" in err
    finally:
        for name in {**_volumes(client, project), **_volumes(client, bare)}:
            client.volumes.get(name).remove(force=True)


def test_a_cache_being_written_or_that_cannot_be_copied_is_not_a_new_caches_start(
    tmp_path: Path,
    machine_env: dict[str, str],
    client: docker.DockerClient,
    local_base: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    project = f"test{uuid.uuid4().hex[:8]}"
    source = f"torchyard-cache-{project}-cpu"

    def run(step: str, name: str) -> str:
        status, _ = _run_with_mounted_test(tmp_path / step, machine_env, client, COLD, project=project, name=name)
        err = capsys.readouterr().err
        assert status == 0, err  # it started empty
        return err

    try:
        _run_with_mounted_test(tmp_path / "1", machine_env, client, TRUSTED_FIRST, project=project)
        # A run of the cpu entry still going: its cache may be half written.
        holder = client.containers.run(
            local_base, ["sleep", "300"], volumes={source: {"bind": "/cache", "mode": "ro"}}, detach=True
        )
        try:
            assert "a new cache starts" not in run("2", "cpu-busy")
        finally:
            holder.remove(force=True)
        # A file the copy cannot read: the copy fails, and the new cache is empty, not half a copy.
        client.containers.run(
            local_base, ["sh", "-c", "touch /cache/unreadable && chmod 000 /cache/unreadable"],
            volumes={source: {"bind": "/cache"}}, remove=True,
        )  # fmt: skip
        assert f"the cache could not be copied from {source}" in run("3", "cpu-unreadable")
    finally:
        for name in _volumes(client, project):
            client.volumes.get(name).remove(force=True)


def test_an_untrusted_run_before_any_trusted_one_creates_no_trusted_scope(
    tmp_path: Path, machine_env: dict[str, str], client: docker.DockerClient
) -> None:
    project = f"test{uuid.uuid4().hex[:8]}"
    cold = "def test_cold():\n    import os\n    assert os.listdir('/cache/inductor') == []\n"
    status, _ = _run_with_mounted_test(tmp_path, machine_env, client, cold, project=project, trust="untrusted")
    assert status == 0
    assert _volumes(client, project) == {}


DEEP_LINKS = """
import os
from pathlib import Path

def test_plant_a_deep_tree_of_links():
    handle = os.open("/reports", os.O_RDONLY)
    for _ in range(60):  # the watch counts 64 folders deep (a deeper tree stops the run); the hand-back keeps 32
        os.mkdir("d", dir_fd=handle)
        inner = os.open("d", os.O_RDONLY, dir_fd=handle)
        os.symlink("/etc/hostname", "leak", dir_fd=inner)
        os.close(handle)
        handle = inner
    for number in range(20):
        Path(f"/reports/top{number}").symlink_to("/etc/hostname")
"""


def test_a_deep_tree_of_links_in_the_reports_is_cut_and_never_followed(
    tmp_path: Path, machine_env: dict[str, str], client: docker.DockerClient, capsys: pytest.CaptureFixture[str]
) -> None:
    status, plan = _run_with_mounted_test(tmp_path, machine_env, client, DEEP_LINKS)
    err = capsys.readouterr().err
    assert status == 0, err
    assert "torchyard: removed top" in err or "torchyard: removed d/leak" in err
    assert "more such entries from the reports" in err  # 20 + 32 links and the cut: ten named, the rest counted
    assert not [path for path in plan.reports.rglob("*") if path.is_symlink()]
    assert (plan.reports / Path(*["d"] * 32)).is_dir() and not (plan.reports / Path(*["d"] * 33)).exists()
    assert (plan.reports / "junit.xml").is_file()


def test_a_test_that_never_ends_is_stopped_at_the_entrys_timeout(
    tmp_path: Path, machine_env: dict[str, str], client: docker.DockerClient, capsys: pytest.CaptureFixture[str]
) -> None:
    forever = "import time\n\ndef test_forever():\n    while True:\n        time.sleep(1)\n"
    status, plan = _run_with_mounted_test(tmp_path, machine_env, client, forever, timeout_s=15)
    assert status == 124
    assert "torchyard: entry 'cpu' ran past its timeout of 15s: the container was stopped" in capsys.readouterr().err
    assert (plan.reports / "parity.md").read_text().endswith("ran past its timeout of 15s: the container was stopped\n")
    assert not client.containers.list(all=True, filters={"name": plan.name})


def test_scratch_space_is_bounded(tmp_path: Path, machine_env: dict[str, str], client: docker.DockerClient) -> None:
    """A test that fills /tmp meets the machine's size (here 64 MiB), not half the host's memory."""
    fill = (
        "import errno\n\n"
        "def test_fill():\n"
        "    written = 0\n"
        "    try:\n"
        "        with open('/tmp/fill', 'wb') as stream:\n"
        "            while written < 1 << 30:\n"
        "                stream.write(b'x' * (1 << 20))\n"
        "                written += 1 << 20\n"
        "    except OSError as error:\n"
        "        assert error.errno == errno.ENOSPC\n"
        "    assert written <= 64 << 20\n"
    )
    seal = Seal(Limits(tmp="64m"), "2g")
    status, _ = _run_with_mounted_test(tmp_path, machine_env, client, fill, seal=seal)
    assert status == 0


def test_reports_over_the_machines_bound_fail_the_run_in_one_line(
    tmp_path: Path, machine_env: dict[str, str], client: docker.DockerClient
) -> None:
    big = "def test_big():\n    open('/reports/big', 'wb').write(b'x' * (3 << 20))\n"
    from torchyard.run.handback import HandBackError

    with pytest.raises(
        # counted at the hand-back, or by the watch while the test still ran: the same bound either way
        HandBackError,
        match=r"(over this machine's 2 MB for|than this machine's 2 MiB of) reports \(machine.toml \[limits\] reports",
    ):
        _run_with_mounted_test(tmp_path, machine_env, client, big, seal=Seal(Limits(reports="2m"), "2g"))
    assert not list((tmp_path / "reports").iterdir())
