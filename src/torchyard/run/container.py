"""Run an entry's suites in its image: device flags, mounts, a named inductor cache, always cleaned up.

The image holds everything the run needs (torchyard's in-image side, the project, its tests); reports
come back through a writable mount owned by the calling user, and the container is removed in
`finally` (Ctrl-C included) unless kept.
"""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import docker
import docker.errors

from torchyard import contract
from torchyard.accelerators import ACCELERATORS
from torchyard.accelerators.protocol import HostFacts
from torchyard.errors import DeviceUnavailableError, TorchyardError
from torchyard.matrix.machine import Limits
from torchyard.matrix.schema import Entry
from torchyard.run.environment import entry_environment
from torchyard.run.reports import exclusive_run, fresh_folder, hand_back
from torchyard.util import proc

IMAGE_USER = "1000:1000"
OOM_STATUS = 137


@dataclass(frozen=True)
class RunPlan:
    entry: str
    image: str
    name: str
    reports: Path
    volume: str
    user: str
    limits: Limits = field(default_factory=Limits)
    image_id: str = ""  # for result replay: the image is part of what decides the verdicts


def sealing_args(limits: Limits, *, network: bool = False) -> tuple[str, ...]:
    """What keeps a test container from reaching the host: no network (unless the entry says why it needs
    one), no capabilities, no privilege gain through setuid, a read-only root with private scratch space,
    and this machine's pids and memory limits. The accelerator's device flags come after these."""
    no_network = () if network else ("--network", "none")
    memory = ("--memory", limits.memory, "--memory-swap", limits.memory) if limits.memory else ()
    scratch = "rw,exec,nosuid,nodev,mode=1777"
    return (
        *no_network,
        "--cap-drop", "ALL",
        "--security-opt", "no-new-privileges",
        "--read-only",
        "--tmpfs", f"/tmp:{scratch}",
        "--tmpfs", f"{contract.IMAGE_HOME}:{scratch}",
        "--pids-limit", str(limits.pids),
        *memory,
    )  # fmt: skip


def container_name(entry: Entry) -> str:
    return f"torchyard-{entry.name}-{uuid.uuid4().hex[:8]}"


def inductor_volume(entry: Entry) -> str:
    return f"torchyard-inductor-{entry.name}"


def run_user(uid: int, gid: int) -> str:
    """The caller's ids, so report files are theirs; root runs as the image's unprivileged user instead."""
    return IMAGE_USER if uid == 0 else f"{uid}:{gid}"


def docker_run_args(
    entry: Entry, plan: RunPlan, host: HostFacts, env: Mapping[str, str], pytest_args: Sequence[str]
) -> tuple[str, ...]:
    """`docker run` arguments, from the accelerator's module and matrix.toml (pure, so tests pin them)."""
    accelerator = ACCELERATORS[entry.accelerator.name]
    suite_env = {
        **entry_environment(entry, contract.IMAGE_REPORTS),
        **contract.plugin_environment(project_tests=entry.tests, extra=pytest_args),
    }
    return (
        "run", "--name", plan.name, "--init",
        "--label", f"dev.torchyard.entry={entry.name}",
        "--user", plan.user,
        "--mount", f"type=bind,source={plan.reports},target={contract.IMAGE_REPORTS}",
        "--mount", f"type=volume,source={plan.volume},target={contract.IMAGE_CACHE}",
        "--mount", f"type=volume,source={plan.volume},target={contract.IMAGE_INDUCTOR_DEFAULT}",
        "--env", f"LOGNAME={contract.IMAGE_LOGNAME}",
        "--workdir", contract.IMAGE_PROJECT,
        *(arg for key, value in sorted(suite_env.items()) for arg in ("--env", f"{key}={value}")),
        *replay_args(plan, env),
        *sealing_args(plan.limits, network=entry.network is not None),
        *accelerator.docker_run_args(host, env),
        *entry.accelerator.docker_run,
        plan.image,
        *contract.pytest_args(
            suites_dir=contract.IMAGE_SUITES,
            report_dir=contract.IMAGE_REPORTS,
            suites=entry.suites,
            project_tests=entry.tests,
            extra=pytest_args,
        ),
    )  # fmt: skip


def replay_args(plan: RunPlan, env: Mapping[str, str]) -> tuple[str, ...]:
    """With `--reuse-results`, the container may replay verdicts; it needs the image's ID to know when not."""
    if env.get(contract.REUSE_RESULTS) != "1":
        return ()
    return ("--env", f"{contract.REUSE_RESULTS}=1", "--env", f"{contract.IMAGE_ID}={plan.image_id}")


def _article(name: str) -> str:
    return "an" if name in ("mps", "xpu") else "a"  # said as letters: "an M-P-S", "an X-P-U"


def require_device_runtime(entry: Entry, host: HostFacts, env: Mapping[str, str]) -> None:
    """A GPU entry on a host without that GPU (or its runtime, or with an empty GPU selection) stops here:
    never a run that tests the CPU."""
    problems = ACCELERATORS[entry.accelerator.name].host_problems(host, env)
    if problems:
        raise DeviceUnavailableError(
            f"entry {entry.name!r} needs {_article(entry.accelerator.name)} {entry.accelerator.name} device: "
            + "; ".join(problems)
        )


@contextmanager
def prepared_reports(path: Path, uid: int, gid: int) -> Iterator[None]:
    """This run's reports folder: held against concurrent runs, empty at the start, writable by the
    container's user, and handed back afterwards without following anything the container left in it."""
    with exclusive_run(path):
        fresh_folder(path)
        if uid == 0:
            image_uid, image_gid = (int(part) for part in IMAGE_USER.split(":"))
            os.lchown(path, image_uid, image_gid)
        try:
            yield
        finally:
            removed = hand_back(path, uid, gid) if uid == 0 else hand_back(path, os.getuid(), os.getgid())
            for name in removed:
                print(f"torchyard: removed {name} from the reports: not a regular file or folder", file=sys.stderr)


def _remove(client: docker.DockerClient, name: str) -> int | None:
    """Remove the container; its exit status and whether the kernel killed it for memory come first."""
    try:
        container = client.containers.get(name)
    except docker.errors.NotFound:
        return None
    state = container.attrs.get("State", {})
    container.remove(force=True)
    return OOM_STATUS if state.get("OOMKilled") else None


def run_entry(
    entry: Entry,
    plan: RunPlan,
    *,
    client: docker.DockerClient,
    docker_path: str,
    host: HostFacts,
    pytest_args: Sequence[str],
    keep: bool = False,
    runner: proc.Runner = proc.run,
    env: Mapping[str, str] = os.environ,
) -> int:
    """Run the container to completion and return its exit status (the suites' status)."""
    require_device_runtime(entry, host, env)
    client.volumes.create(plan.volume, labels={"dev.torchyard.entry": entry.name})
    args = (docker_path, *docker_run_args(entry, plan, host, env, pytest_args))
    status: int | None = None
    oom: int | None = None
    with prepared_reports(plan.reports, os.getuid(), os.getgid()):
        try:
            status = runner(args, check=False, env=env).returncode
        finally:
            if not keep:
                oom = _remove(client, plan.name)
    if oom is not None or status == OOM_STATUS:
        cause = "out of memory" if oom is not None else "SIGKILL (out of memory, or stopped from outside)"
        print(f"torchyard: the container for entry {entry.name!r} was killed: {cause}", file=sys.stderr)
        return OOM_STATUS
    if status is None:
        raise TorchyardError(f"entry {entry.name!r}: the container did not run")
    return status
