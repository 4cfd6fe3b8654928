"""Run an entry's suites in its image: device flags, mounts, a named inductor cache, always cleaned up.

The image holds everything the run needs (torchyard's in-image side, the project, its tests); reports
come back through a writable mount owned by the calling user, and the container is removed in
`finally` (Ctrl-C included) unless kept.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
import uuid
from collections.abc import Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import NoReturn

import docker
import docker.errors

from torchyard import contract
from torchyard.accelerators import ACCELERATORS
from torchyard.accelerators.protocol import HostFacts
from torchyard.errors import CommandError, ConfigError, DeviceUnavailableError, TorchyardError
from torchyard.image.layers import stack_of
from torchyard.matrix.machine import Limits, Machine, duration_seconds, size_bytes
from torchyard.matrix.reader import one_line
from torchyard.matrix.schema import Entry
from torchyard.run.bounds import Bound, run_bounds
from torchyard.run.environment import entry_environment
from torchyard.run.handback import (
    HandBackError,
    crash_note,
    exclusive_run,
    fresh_folder,
    hand_back,
    read_report,
)
from torchyard.run.scopes import (
    DEADLINE_LABEL,
    ENTRY_LABEL,
    STACK_LABEL,
    TRUST_LABEL,
    CacheScope,
    cache_scope,
    prime_volume,
    run_id,
    seed_helper,
    seed_image,
    sibling_filters,
    untrusted_ending,
)
from torchyard.run.staging import (
    abandoned,
    holding,
    make_stage,
    publish,
    remove_stage,
    staging_root,
    sweep_stages,
)
from torchyard.run.stamp import stamp_reports
from torchyard.seal import (
    IMAGE_USER,
    Seal,
    check_matrix_flags,
    check_untrusted_seal,
    run_groups,
    run_sealed,
    run_user,
    sealing_args,
    warden_bound,
    warden_options,
)
from torchyard.trust import TRUST_ENV, RunTrust
from torchyard.util import proc
from torchyard.util.folders import MAX_DEPTH

OOM_STATUS = 137
TIMEOUT_STATUS = 124  # as timeout(1) exits
WATCH_INTERVAL_S = 1.0
JOB_ENDS_ENV = "TORCHYARD_JOB_ENDS_AT"  # the CI job's start plus its timeout-minutes, written by its first step
JOB_MARGIN_S = 5 * 60  # the hand-back, the container's removal and the upload after the run
IN_CONTAINER_GRACE_S = 60  # the most the container's own bound lies past the host's deadline
KILL_AFTER_S = 30  # then SIGKILL, as `docker stop` would


@dataclass(frozen=True)
class RunPlan:
    entry: str
    image: str
    name: str
    reports: Path
    scope: CacheScope
    user: str
    seal: Seal = field(default_factory=lambda: Seal(Limits(), "0"))
    image_id: str = ""  # for result replay: the image is part of what decides the verdicts
    timeout_s: int = 0  # the host stops the container after this long (0: at the machine's cap)
    staging: Path = field(default_factory=staging_root)  # where the container's reports are vetted first
    ends_at: int = 0  # the Unix time past which the container is gone whoever stops it (0: not bounded)
    seed_image: str = ""  # what the cache seed's copy runs in (`scopes.seed_image`); none: the cache starts empty

    @property
    def stage(self) -> Path:
        """The folder the container writes its reports to (mounted at /reports), never `reports` itself."""
        return self.staging / self.name


def container_name(entry: Entry) -> str:
    return f"torchyard-{entry.name}-{uuid.uuid4().hex[:8]}"


def _network(entry: Entry, trust: RunTrust, machine: Machine) -> bool:
    """An entry's `network` takes the machine's permission, and a trusted run."""
    if entry.network is None:
        return False
    if not machine.allows_network:
        raise ConfigError(
            f'matrix.toml: entry "{entry.name}" > network: this machine does not let tests reach the network '
            "(machine.toml [allow] network = true)"
        )
    if not trust.trusted:
        print(f"torchyard: untrusted run: entry {entry.name!r}'s tests get no network", file=sys.stderr)
    return trust.trusted


def _timeout(entry: Entry, limits: Limits, env: Mapping[str, str], now: float | None = None) -> int:
    """The entry's `timeout`, within this machine's cap and within what is left of the CI job's own time
    (TORCHYARD_JOB_ENDS_AT: the job's start plus its `timeout-minutes`, which the workflows write in their first
    step) less the hand-back's margin: a run the job outlives by nothing would be killed with it, its container
    left running."""
    wanted, cap = duration_seconds(entry.timeout), duration_seconds(limits.timeout)
    if wanted > cap:
        print(f"torchyard: entry {entry.name!r}: timeout {entry.timeout} capped at this machine's {limits.timeout}")
    ends = env.get(JOB_ENDS_ENV, "")
    if not ends:
        return min(wanted, cap)
    if not ends.isdigit():
        raise ConfigError(f"{JOB_ENDS_ENV}={ends!r}: expected the CI job's end as a Unix time in seconds")
    room = int(ends) - int(time.time() if now is None else now) - JOB_MARGIN_S
    if room < 60:
        raise DeviceUnavailableError(
            f"entry {entry.name!r}: the CI job ends in {format_duration(max(room + JOB_MARGIN_S, 0))}, too soon for "
            f"a run and its hand-back ({format_duration(JOB_MARGIN_S)}): raise the job's timeout-minutes"
        )
    if room < min(wanted, cap):
        print(f"torchyard: entry {entry.name!r}: timeout capped at {format_duration(room)}, inside the CI job's time")
    return min(wanted, cap, room)


def plan_run(
    entry: Entry,
    image: str,
    *,
    client: docker.DockerClient,
    reports: Path,
    project: str,
    trust: RunTrust,
    machine: Machine,
    matrix_tag: str = "",
    memory: str,
    env: Mapping[str, str] = os.environ,
) -> RunPlan:
    """One entry's container run: a fresh name, the cache scope of its project and trust, this user, the seal
    (a network only where the machine and the run's trust both allow one) and the deadline."""
    name = container_name(entry)
    found = client.images.get(image)
    return RunPlan(
        entry=entry.name,
        image=image,
        name=name,
        reports=reports,
        scope=cache_scope(entry, project, trust.level, run_id(name), stack_of(found.labels), matrix_tag=matrix_tag),
        user=run_user(os.getuid(), os.getgid()),
        seal=Seal(machine.limits, memory, network=_network(entry, trust, machine)),
        image_id=str(found.id),
        timeout_s=_timeout(entry, machine.limits, env),
        seed_image=seed_image(entry, machine.base_overrides),
    )


def container_bound(plan: RunPlan) -> int:
    """The seconds the container's warden gives the run: the host's deadline and a grace (a tenth of it,
    5 s to a minute), so the host stops it first and says so, and a torchyard killed outright still leaves no
    container past it."""
    return plan.timeout_s + min(max(plan.timeout_s // 10, 5), IN_CONTAINER_GRACE_S)


def docker_run_args(
    entry: Entry, plan: RunPlan, host: HostFacts, env: Mapping[str, str], pytest_args: Sequence[str]
) -> tuple[str, ...]:
    """`docker run` arguments, from the accelerator's module and matrix.toml (pure, so tests pin them): the
    options, the image, then the command, under the image's warden (PID 1), with the run's deadline if it has
    one (0: none)."""
    command = contract.pytest_args(
        inimage_dir=contract.IMAGE_INIMAGE,
        report_dir=contract.IMAGE_REPORTS,
        suites=entry.suites,
        project_tests=entry.tests,
        extra=pytest_args,
    )
    bound = container_bound(plan) if plan.timeout_s > 0 else 0
    options = docker_run_options(entry, plan, host, env, pytest_args)
    warden = warden_bound(bound, KILL_AFTER_S, plan.user, run_groups(options))
    return ("run", *options, *warden_options(), plan.image, *warden, *contract.IMAGE_ENTRYPOINT, *command)


def docker_run_options(
    entry: Entry, plan: RunPlan, host: HostFacts, env: Mapping[str, str], pytest_args: Sequence[str]
) -> tuple[str, ...]:
    """Every option of `docker run` before the image but the warden's own (`seal.warden_options`): what the
    untrusted seal check reads, whole. The code under test runs as `plan.user`, the warden's to set."""
    accelerator = ACCELERATORS[entry.accelerator.name]
    suite_env = {
        **entry_environment(entry, contract.IMAGE_REPORTS),
        **contract.plugin_environment(project_tests=entry.tests, extra=pytest_args),
    }
    device = accelerator.docker_run_args(host, env)
    deadline = {DEADLINE_LABEL: str(plan.ends_at)} if plan.ends_at else {}
    labels = {**plan.scope.labels(entry), **deadline}
    return (
        # the warden is the container's first process: its own deadline holds without torchyard, and the code
        # under test can neither stop nor trace it (docs/concepts/trust.md)
        "--name", plan.name, "--entrypoint", contract.IMAGE_WARDEN,
        *(arg for key, value in labels.items() for arg in ("--label", f"{key}={value}")),
        "--mount", f"type=bind,source={plan.stage},target={contract.IMAGE_REPORTS}",
        "--mount", f"type=volume,source={plan.scope.volume},target={contract.IMAGE_CACHE}",
        "--mount", f"type=volume,source={plan.scope.volume},target={contract.IMAGE_INDUCTOR_DEFAULT}",
        "--workdir", contract.IMAGE_PROJECT,
        *sealing_args(plan.seal),
        *device,
        *entry.accelerator.docker_run,
        # torchyard's own variables last: docker keeps the last value, so no flag above can set them.
        "--env", f"LOGNAME={contract.IMAGE_LOGNAME}",
        "--env", f"{TRUST_ENV}={plan.scope.trust}",
        *(arg for key, value in sorted(suite_env.items()) for arg in ("--env", f"{key}={value}")),
        *replay_args(plan, env),
    )  # fmt: skip


def replay_args(plan: RunPlan, env: Mapping[str, str]) -> tuple[str, ...]:
    """The image's ID on every run, so what a plain run keeps is found by the next `--reuse-results` run (the
    ID says when not to replay); replaying itself only when asked."""
    reuse = ("--env", f"{contract.REUSE_RESULTS}=1") if env.get(contract.REUSE_RESULTS) == "1" else ()
    return (*reuse, *(("--env", f"{contract.IMAGE_ID}={plan.image_id}") if plan.image_id else ()))


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
def staged_reports(plan: RunPlan, uid: int) -> Iterator[Path]:
    """The run's staging folder (`torchyard.run.staging`), writable by the container's user, while the reports
    folder is held against concurrent runs and emptied: nothing reaches it until `hand_over`. The staging
    folder is removed however the run ends."""
    with exclusive_run(plan.reports):
        fresh_folder(plan.reports)
        image_uid, image_gid = (int(part) for part in IMAGE_USER.split(":"))
        stage = make_stage(plan.stage, (image_uid, image_gid) if uid == 0 else None)
        try:
            with holding(stage):
                yield stage
        finally:
            remove_stage(stage)


def hand_over(stage: Path, plan: RunPlan, facts: Mapping[str, str]) -> None:
    """Vet what the container left (links and special files removed, the bound counted; emptied on any
    error), stamp the host's facts over it, then copy it into the reports folder. A stamp that fails for
    any reason leaves the reports empty and fails the run in one line."""
    removed = hand_back(stage, os.getuid(), os.getgid(), limit_bytes=size_bytes(plan.seal.limits.reports))
    for name in removed[:10]:  # names the container chose: their control characters escaped, never sent
        print(f"torchyard: removed {one_line(name)} from the reports: not a regular file or folder", file=sys.stderr)
    if len(removed) > 10:
        print(f"torchyard: removed {len(removed) - 10} more such entries from the reports", file=sys.stderr)
    stamp_reports(stage, facts)  # fails closed: the stage emptied, nothing published
    publish(stage, plan.reports)


def sweep_leftovers(client: docker.DockerClient, staging: Path, now: float | None = None) -> None:
    """Remove what runs killed outright left: torchyard's containers whose run is gone (its staging folder no
    longer held: at once, whatever their deadline, so a dead run's container never holds the device until its
    warden ends it) or that are past their deadline label, then the staging folders of containers that are
    gone."""
    moment = time.time() if now is None else now
    gone = []
    for container in client.containers.list(all=True, filters={"label": ENTRY_LABEL}):
        ends = (container.labels or {}).get(DEADLINE_LABEL, "")
        if abandoned(staging, str(container.name)):
            why = "its run is gone (a run killed outright, or its job cancelled)"
        elif ends.isdigit() and int(ends) < moment:
            why = "past its deadline (a run killed outright)"
        else:
            continue
        print(f"torchyard: removing container {container.name}: {why}")
        with contextlib.suppress(docker.errors.APIError):
            container.remove(force=True)
        gone.append(str(container.name))
    alive = {str(container.name) for container in client.containers.list(all=True)}
    for name in sweep_stages(staging, alive):
        print(f"torchyard: removed the staging folder of {name} (a run killed outright)", file=sys.stderr)
        gone.append(name)
    _remove_untrusted_caches(client, gone)


def _remove_untrusted_caches(client: docker.DockerClient, runs: Collection[str]) -> None:
    """The untrusted cache volume of each run known gone (`runs`: their containers' names): made for that run
    alone, and otherwise left until `prune`. A volume a container still uses stays."""
    endings = {untrusted_ending(run_id(name)) for name in runs}
    if not endings:
        return
    for volume in client.volumes.list(filters={"label": f"{TRUST_LABEL}=untrusted"}):
        if str(volume.name).endswith(tuple(endings)):
            with contextlib.suppress(docker.errors.APIError):
                volume.remove()
                print(f"torchyard: removed volume {volume.name}: its untrusted run is gone", file=sys.stderr)


def _remove(client: docker.DockerClient, name: str) -> int | None:
    """Remove the container; its exit status and whether the kernel killed it for memory come first."""
    try:
        container = client.containers.get(name)
    except docker.errors.NotFound:
        return None
    state = container.attrs.get("State", {})
    container.remove(force=True)
    return OOM_STATUS if state.get("OOMKilled") else None


def _volume_exists(client: docker.DockerClient, name: str, labels: Mapping[str, str] | None = None) -> bool:
    """Whether the engine has volume `name`; with `labels`, one it has must carry them (the engine hands back
    an existing volume on create, its labels as they were): one made by anything else is refused."""
    try:
        volume = client.volumes.get(name)
    except docker.errors.NotFound:
        return False
    held = volume.attrs.get("Labels") or {}
    differs = [key for key, value in (labels or {}).items() if key != STACK_LABEL and held.get(key) != value]
    if differs:
        raise ConfigError(
            f"the volume {name} is not this scope's cache (its {differs[0]} label says "
            f"{held.get(differs[0])!r}): it was not made by a run of this entry; remove it (docker volume rm {name})"
        )
    return True


def prepare_cache(
    entry: Entry,
    plan: RunPlan,
    *,
    client: docker.DockerClient,
    docker_path: str,
    runner: proc.Runner,
    env: Mapping[str, str],
) -> None:
    """The run's cache volume, labelled with its scope. An untrusted run's is a fresh copy of the trusted scope
    (when there is one: an untrusted run never creates it); a new one (an entry's first run, or an untrusted run
    with no trusted scope) starts as a copy of a trusted cache of the project's on the same stack that no
    container is using, if any. A copy that fails leaves a new volume empty, never half-copied."""
    scope = plan.scope
    new = not _volume_exists(client, scope.volume, scope.labels(entry))
    client.volumes.create(scope.volume, labels=scope.labels(entry))
    trusted_labels = {**scope.labels(entry), TRUST_LABEL: "trusted"}
    folder = "."  # the whole cache
    if scope.seed is not None and _volume_exists(client, scope.seed, trusted_labels):
        source, why = scope.seed, "untrusted run: the cache starts as a copy of the trusted scope"
    elif new and (same := _idle_siblings(client, scope, same_stack=True)):
        source, why = same[0], f"{scope.trust} run: a new cache starts as a copy of the same stack's"
    elif new and (other := _idle_siblings(client, scope, same_stack=False)):
        # Another stack's programs and inductor caches serve nothing here; its self-tests' proofs are keyed by
        # the versions they exercise, which two stacks of one project often share (a lock that adds a model's
        # dependency).
        source, why, folder = (
            other[0],
            f"{scope.trust} run: a new cache starts with the self-tests' proofs of",
            contract.SELF_TESTS_STORE,
        )
    else:
        return
    if not plan.seed_image:
        return  # never the run's own image: a cache it cannot be seeded into safely starts empty
    copy = seed_helper(scope, source, image=plan.seed_image, user=plan.user, name=plan.name, folder=folder)
    try:
        prime_volume(client, scope, plan.image)
        run_sealed(copy, docker_path=docker_path, runner=runner, env=env)
    except BaseException as error:
        if new or scope.ephemeral:
            client.volumes.get(scope.volume).remove(force=True)
            client.volumes.create(scope.volume, labels=scope.labels(entry))
        if not isinstance(error, CommandError):
            raise
        # the other stack's cache may hold no proof (its runs left the self-tests to run): said with cp's status
        what = (
            "no self-tests' proof to start from in"
            if folder == contract.SELF_TESTS_STORE
            else "the cache could not be copied from"
        )
        print(f"torchyard: {what} {source} ({error}); it starts empty", file=sys.stderr)
        return
    print(f"torchyard: {why} {source}", file=sys.stderr)


def _idle_siblings(client: docker.DockerClient, scope: CacheScope, *, same_stack: bool) -> list[str]:
    """The trusted caches of the project's other entries (`sibling_filters`) that no container is using."""
    if same_stack and not scope.stack:
        return []
    found = client.volumes.list(filters=sibling_filters(scope, same_stack=same_stack))
    return [
        name
        for name in sorted(str(volume.name) for volume in found)
        if name != scope.volume and not _in_use(client, name)
    ]


def _in_use(client: docker.DockerClient, volume: str) -> bool:
    """Whether a container mounts `volume`: a cache being written is not copied (its copy could be torn)."""
    return bool(client.containers.list(filters={"volume": volume}))


def _over(bound: Bound) -> bool:
    """Whether `bound`'s folder holds more than its limit; a count that fails any way is over it (fails closed):
    the watch that also holds the deadline never dies of it."""
    try:
        return bound.size() > bound.limit
    except Exception:
        return True


class _Watch:
    """Stops the container when the run's time is up (docker stop: SIGTERM, then SIGKILL after 10 s), and
    kills it when a folder it writes on the host passes its bound while it writes: a run cannot fill the
    host's disk before the hand-back counts what it left."""

    def __init__(self, client: docker.DockerClient, name: str, seconds: int, bounds: Sequence[Bound]) -> None:
        self.passed = False  # the deadline
        self.overflowed: Bound | None = None
        self._client, self._name, self._bounds = client, name, bounds
        self._ends = time.monotonic() + seconds if seconds > 0 else None
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def _watch(self) -> None:
        tick = 0
        while not self._done.wait(WATCH_INTERVAL_S):
            tick += 1
            if self._ends is not None and time.monotonic() >= self._ends:
                self.passed = True
            else:
                due = (bound for bound in self._bounds if tick % bound.every == 0)
                self.overflowed = next((bound for bound in due if _over(bound)), None)
                if self.overflowed is None:
                    continue
            with contextlib.suppress(docker.errors.APIError):  # gone already
                container = self._client.containers.get(self._name)
                # past a bound it is killed at once: a writer that ignores SIGTERM gets no grace to write on
                container.kill() if self.overflowed else container.stop(timeout=10)
            return

    def __enter__(self) -> _Watch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join()


def format_duration(seconds: int) -> str:
    for unit, size in (("h", 3600), ("m", 60)):
        if seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def note_timeout(reports: Path, entry: Entry, timeout: str) -> str:
    """The one line a run stopped at its deadline gets, also at the end of parity.md (the step summary)."""
    line = f"entry {entry.name!r} ran past its timeout of {timeout}: the container was stopped"
    existing = read_report(reports / contract.PARITY_MARKDOWN) or ""
    (reports / contract.PARITY_MARKDOWN).write_text(f"{existing}\n**Stopped**: {line}\n")
    return line


def _overflowed(entry: Entry, bound: Bound) -> NoReturn:
    raise HandBackError(
        f"entry {entry.name!r}: the run wrote more than this machine's {bound.limit >> 20} MiB of {bound.what} "
        f"(machine.toml [limits] {bound.what}), or what it wrote could not be counted (a tree deeper than "
        f"{MAX_DEPTH} folders): the container was stopped while it wrote, the reports emptied"
    )


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
    """Run the container to completion (or its deadline) and return its exit status (the suites' status).
    What an earlier run killed outright left (a container past its deadline, its staging folder) goes first."""
    require_device_runtime(entry, host, env)
    check_matrix_flags(entry, plan.seal)
    # every option, by position: a value equal to the image's tag ends nothing (before any engine call)
    check_untrusted_seal(docker_run_options(entry, plan, host, env, pytest_args), plan.scope.trust == "trusted")
    sweep_leftovers(client, plan.staging)
    status: int | None = None
    oom: int | None = None
    try:
        prepare_cache(entry, plan, client=client, docker_path=docker_path, runner=runner, env=env)
        if plan.timeout_s > 0:
            plan = replace(plan, ends_at=int(time.time()) + container_bound(plan) + KILL_AFTER_S)
        args = (docker_path, *docker_run_args(entry, plan, host, env, pytest_args))
        with staged_reports(plan, os.getuid()) as stage:
            bounds = run_bounds(client, plan, stage)
            watch = _Watch(client, plan.name, plan.timeout_s, bounds)
            with watch:
                try:
                    status = runner(args, check=False, env=env).returncode
                finally:
                    if not keep:
                        oom = _remove(client, plan.name)
            if watch.overflowed is not None:
                _overflowed(entry, watch.overflowed)  # nothing handed over: the reports stay empty
            try:
                # `stack`, the image's dependency layers' key, is what a comparison calls the stack (the tag moves
                # with the project's own code too, which is what a change changes); stamped where empty too.
                facts = {"trust": plan.scope.trust, "entry": entry.name, "image": plan.image, "stack": plan.scope.stack}
                hand_over(stage, plan, facts)
            except HandBackError:
                if watch.overflowed is None:
                    raise
                _overflowed(entry, watch.overflowed)
    finally:
        if plan.scope.ephemeral and not keep:
            with contextlib.suppress(docker.errors.APIError):
                client.volumes.get(plan.scope.volume).remove(force=True)
    if status == TIMEOUT_STATUS and plan.timeout_s > 0 and not watch.passed:
        watch.passed = True  # the container's own bound ended it (the host's watch had not)
    if watch.passed:
        print(f"torchyard: {note_timeout(plan.reports, entry, format_duration(plan.timeout_s))}", file=sys.stderr)
        return TIMEOUT_STATUS
    if oom is not None or status == OOM_STATUS:
        cause = "out of memory" if oom is not None else "SIGKILL (out of memory, or stopped from outside)"
        print(f"torchyard: the container for entry {entry.name!r} was killed: {cause}", file=sys.stderr)
        return OOM_STATUS
    if status is None:
        raise TorchyardError(f"entry {entry.name!r}: the container did not run")
    crashed = crash_note(plan.reports, status, in_container=True)
    if crashed is not None:
        print(f"torchyard: entry {entry.name!r}: {crashed}", file=sys.stderr)
    return status
