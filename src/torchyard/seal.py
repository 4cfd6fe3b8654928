"""The seal around every container torchyard starts, and the rule that matrix.toml can only tighten it.

One seal, spelled once: test containers, the wheel's fetch and build containers, the cache seed and the
built image's checks all run as an unprivileged user with no capabilities, no privilege gain, a read-only
root, bounded private scratch, and pids and memory limits; the helpers also get a wall-clock bound.
matrix.toml comes from the pull request under test, so nothing in it may widen what the container reaches
or uses: its resource flags may lower this machine's limits (machine.toml `[limits]`), never raise them; a
network needs the machine's permission (`[allow] network = true`) and a trusted run.
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from torchyard import contract
from torchyard.errors import ConfigError
from torchyard.matrix.machine import Limits, size_bytes
from torchyard.matrix.schema import Entry
from torchyard.matrix.values import flag_values, stray_words
from torchyard.util import proc

SCRATCH = "rw,exec,nosuid,nodev,mode=1777"
LOG_BYTES = "16m"
IMAGE_USER = "1000:1000"


@dataclass(frozen=True)
class Seal:
    """What this run's container gets: the machine's limits (memory resolved to bytes) and a network or not."""

    limits: Limits
    memory: str  # docker's --memory for this run: the machine's, else its share of the engine's memory
    network: bool = False


# torchyard's own containers (wheel fetch and build, cache seed, image check): the code they run is a build
# backend, a copy or a check, so they get fixed limits of their own, and a deadline.
HELPER_SEAL = Seal(Limits(memory="8g", tmp="2g", home="256m"), memory="8g")
HELPER_SECONDS = 1800


def run_user(uid: int, gid: int) -> str:
    """The caller's ids, so report files are theirs; root runs as the image's unprivileged user instead."""
    return IMAGE_USER if uid == 0 else f"{uid}:{gid}"


# The warden (PID 1 of a torchyard image's containers) starts as root with these, starts the command as the
# run's user, which leaves the command none, and keeps KILL alone: the code under test is another user's, who
# can neither signal, trace nor reschedule it (a same-user process starved the warden past its deadline).
WARDEN_USER = "0:0"
WARDEN_CAPABILITIES = ("KILL", "SETUID", "SETGID", "SETPCAP")  # SETPCAP: to empty the command's bounding set


def warden_options() -> tuple[str, ...]:
    """`docker run`'s options for a container whose first process is the image's warden: torchyard's own,
    outside what the untrusted seal check reads (an added capability is a loosening anywhere else), and last,
    so no option before them sets the user. No health check: one runs as the container's user, root."""
    caps = (arg for name in WARDEN_CAPABILITIES for arg in ("--cap-add", name))
    return ("--user", WARDEN_USER, *caps, "--no-healthcheck")


def warden_bound(seconds: int, kill_after: int, user: str, groups: Sequence[str] = ()) -> tuple[str, ...]:
    """The warden's arguments before `--` and the command: its deadline, its grace, and the command's ids
    (`user`, never root, and the supplementary groups the accelerator's devices need)."""
    return (str(seconds), str(kill_after), f"{user}:{','.join(groups)}" if groups else user, "--")


def helper_args(user: str, *, network: bool = False, warden: bool = True) -> tuple[str, ...]:
    """The seal of a container torchyard starts around its own work: a test container's, its command run as
    `user` (never root; by the image's warden, else by docker); `network` (the wheel's fetch only) lifts
    nothing else."""
    who = warden_options() if warden else ("--user", user)
    return (*who, *sealing_args(Seal(HELPER_SEAL.limits, HELPER_SEAL.memory, network)))


def run_groups(options: Sequence[str]) -> tuple[str, ...]:
    """The groups `--group-add` gives in `docker run` options: the warden's (root's) own, handed to the command."""
    return tuple(value for _, flag, value in flag_values(tuple(options)) if flag == "--group-add")


@dataclass(frozen=True)
class Helper:
    """A container torchyard starts around its own work: its name, who it runs as (never root), its image and
    command, its own mounts and variables (`options`), and whether it gets the network (the wheel's fetch
    only, which lifts nothing else)."""

    name: str
    user: str
    image: str
    command: tuple[str, ...]
    options: tuple[str, ...] = ()
    network: bool = False
    # a torchyard image's warden (PID 1) holds its deadline; a bare base (the preflight probe, which runs no
    # project code) has only its own `timeout`
    warden: bool = True


def uncopied_volumes(options: Sequence[str]) -> list[str]:
    """The volumes in a helper's options that Docker would fill from the image when empty: a `--mount` of a
    volume without `volume-nocopy`, and every `-v`/`--volume` (whose spelling torchyard does not use)."""
    found = []
    for _, flag, value in flag_values(tuple(options)):
        parts = value.split(",")
        if flag in {"-v", "--volume"} or (
            flag == "--mount" and "type=volume" in parts and "volume-nocopy" not in parts
        ):
            found.append(value)
    return found


def sealed_run(helper: Helper) -> tuple[str, ...]:
    """`docker run` of `helper`, sealed (`sealing_args`) and killed after HELPER_SECONDS: a hung backend or copy
    never holds the runner, and a build backend cannot stop or trace the image's warden that ends it (a bare
    base's own `timeout` where there is no warden). Both by their paths: the image's PATH starts with the venv,
    where a project can install a script of that name. Every volume it mounts is `volume-nocopy`: Docker fills
    an empty volume from the image otherwise, read-only mount or not (a helper mounting one without is
    torchyard's bug)."""
    uncopied = uncopied_volumes(helper.options)
    if uncopied:
        raise ValueError(f"helper {helper.name}: mount {uncopied[0]!r} without volume-nocopy")
    bound = (
        (contract.IMAGE_WARDEN, helper.image, *warden_bound(HELPER_SECONDS, 0, helper.user))
        if helper.warden
        else (contract.IMAGE_TIMEOUT, helper.image, "--signal=KILL", str(HELPER_SECONDS))
    )
    return (
        "run", "--rm", "--name", helper.name,
        *helper_args(helper.user, network=helper.network, warden=helper.warden), *helper.options,
        "--entrypoint", *bound, *helper.command,
    )  # fmt: skip


def run_sealed(
    helper: Helper,
    *,
    docker_path: str,
    runner: proc.Runner,
    env: Mapping[str, str],
    capture: bool = False,
    check: bool = True,
) -> subprocess.CompletedProcess[str]:
    """`sealed_run(helper)`, run; a stop (Ctrl-C, or SIGTERM and SIGHUP, which torchyard takes as Ctrl-C) removes
    the container before torchyard ends: `docker run`'s client, killed, leaves it running to its bound
    (HELPER_SECONDS), beside the runner's next job."""
    try:
        return runner((docker_path, *sealed_run(helper)), env=env, capture=capture, check=check)
    except KeyboardInterrupt:
        runner((docker_path, "rm", "--force", helper.name), env=env, capture=True, check=False)
        raise


def sealing_args(seal: Seal) -> tuple[str, ...]:
    """What keeps a test container from reaching the host: no network (unless the machine allows the entry
    one and the run is trusted), no capabilities, no privilege gain through setuid, a read-only root with
    private scratch space of bounded size, and this machine's pids and memory limits. The accelerator's
    device flags and matrix.toml's own flags (checked by `check_matrix_flags`) come after these."""
    limits = seal.limits
    return (
        *(() if seal.network else ("--network", "none")),
        "--cap-drop", "ALL",
        "--security-opt", "no-new-privileges",
        "--read-only",
        "--tmpfs", f"/tmp:{SCRATCH},size={limits.tmp}",
        "--tmpfs", f"{contract.IMAGE_HOME}:{SCRATCH},size={limits.home}",
        "--pids-limit", str(limits.pids),
        *(("--memory", seal.memory, "--memory-swap", seal.memory) if seal.memory != "0" else ()),
        # what it prints is streamed to torchyard; the engine's copy of it is bounded too
        "--log-driver", "json-file", "--log-opt", f"max-size={LOG_BYTES}", "--log-opt", "max-file=1",
    )  # fmt: skip


# Flags (and values) that open the host's namespaces or drop the kernel's filters: never part of an untrusted
# run, whoever wrote them (the trusted matrix.toml, with the machine's permission, may give them to trusted runs).
HOST_NAMESPACES = ("--ipc", "--pid", "--uts", "--userns", "--network", "--net", "--cgroupns")
UNCONFINED = ("seccomp=unconfined", "apparmor=unconfined", "label=disable", "label:disable", "systempaths=unconfined")


def loosening(args: Sequence[str]) -> list[str]:
    """The flags in a `docker run` argument list that give up the seal (a host namespace, no seccomp or
    AppArmor profile, privileges, added capabilities)."""
    found = []
    for position, flag, value in flag_values(tuple(args)):
        if flag in {"--privileged", "--cap-add"}:
            found.append(args[position])
        elif (flag in HOST_NAMESPACES and value == "host") or (flag == "--security-opt" and value in UNCONFINED):
            found.append(f"{flag}={value}")
    return found


def check_untrusted_seal(args: Sequence[str], trusted: bool) -> None:
    """An untrusted run's container keeps every namespace and filter, whatever asked to open one; and `args`,
    every option before the image, read as docker reads them, hold no word docker would take for the image."""
    stray = stray_words(tuple(args))
    if stray:
        raise ConfigError(f"docker run's options end early: {args[stray[0]]!r} would be taken for the image")
    opened = loosening(args)
    if opened and not trusted:
        raise ConfigError(
            f"an untrusted run's container keeps the seal: {', '.join(opened)} is given to trusted runs only"
        )


def check_matrix_flags(entry: Entry, seal: Seal) -> None:
    """A matrix.toml resource flag above this machine's limit is one line naming machine.toml."""
    machine = {"--memory": seal.memory, "--memory-swap": seal.memory, "--pids-limit": str(seal.limits.pids)}
    for position, flag, value in flag_values(entry.accelerator.docker_run):
        if flag not in machine:
            continue
        limit = machine[flag]
        if flag == "--pids-limit":
            above = not value.isdigit() or int(value) == 0 or int(value) > int(limit)
        else:
            above = limit != "0" and _bytes(value) > _bytes(limit)
        if above:
            raise ConfigError(
                f"matrix.toml: accelerators > {entry.accelerator.name} > docker-run[{position}]: {flag} {value} is "
                f"above this machine's {limit} (machine.toml [limits]); matrix.toml may lower a limit, never raise it"
            )


def _bytes(value: str) -> int:
    """A size in bytes; -1 and 0 (both unlimited to docker: 0 unsets the limit, and `--memory-swap 0` is
    twice the memory) and anything unreadable count as above any limit."""
    try:
        size = size_bytes(value.lower())
    except (ValueError, KeyError, IndexError):
        return 1 << 62
    return size if size > 0 else 1 << 62


def default_memory(limits: Limits, engine_memory: int, share: float) -> str:
    """The machine's memory limit, else `share` of the engine's memory (in MiB); "0" leaves it unlimited
    only where the engine does not say how much it has."""
    if limits.memory:
        return limits.memory
    return f"{int(engine_memory * share) >> 20}m" if engine_memory > 0 else "0"
