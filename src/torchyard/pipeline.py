"""The steps of a run, in order, in one list that `torchyard build` and `torchyard test` share.

As nox's `_cli.py` lists its tasks, `STEPS` lists a run's: each is a plain function of the request (what
the command asked, fixed) and the run so far (what the steps before it found). A build stops after its
images; the run ends wherever no entry is left for a container.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

import docker

from torchyard.accelerators import HostFacts
from torchyard.errors import DockerUnavailableError, ImageBuildError, UsageError
from torchyard.host.engine import DockerCli, build_client, engine
from torchyard.host.facts import gather_host_facts
from torchyard.image.obtain import Inputs, obtain_image
from torchyard.image.outcome import Built, images_markdown
from torchyard.image.plan import NO_OPTIONS, BuildOptions
from torchyard.image.policy import TRUSTED, BuildPolicy, build_policy
from torchyard.image.registry import NO_REGISTRY, publish
from torchyard.lock.check import require_fresh
from torchyard.lock.resolve import uv_version
from torchyard.matrix.machine import MEMORY_SHARE, Machine
from torchyard.matrix.schema import Entry
from torchyard.reports.baseline import hold_to_baseline, store_for
from torchyard.run.container import plan_run, require_device_runtime, run_entry
from torchyard.run.handback import reports_folder, summarize
from torchyard.run.inplace import run_in_place
from torchyard.run.venv import run_local
from torchyard.seal import Seal, check_matrix_flags, check_untrusted_seal, default_memory
from torchyard.trust import MATRIX, RunTrust, matrix_tag, project_scope
from torchyard.util import proc
from torchyard.util.git import head_fact
from torchyard.util.markdown import append_step_summary, markdown_table

LOCAL_HINT = "; `nox -s test-cpu -- --local` runs the suites without Docker"
Mode = Literal["container", "local", "in-place"]


@dataclass(frozen=True)
class Tests:
    """What `torchyard test` asks beyond the images: where the suites run, with what, and the run's trust."""

    mode: Mode
    reports: Path
    pytest_args: Sequence[str]
    trust: RunTrust
    keep: bool = False
    unsandboxed: bool = False
    baseline: Path | None = None  # the run each entry's is held to (`--baseline`); else its last trusted run


@dataclass(frozen=True)
class Request:
    """What the command asked; `tests` is None for a build, which runs nothing."""

    entries: tuple[Entry, ...]
    lockdir: Path
    machine: Machine
    project: str  # what names its images and scopes its caches (`torchyard.trust.project_scope`)
    runner: proc.Runner
    env: Mapping[str, str]
    options: BuildOptions = NO_OPTIONS
    tests: Tests | None = None
    summarize_found: bool = True  # the images found on this runner go into the step summary too
    matrix_tag: str = ""  # sets the matrix file's entries apart in caches and baselines (`trust.matrix_tag`)


@dataclass
class Progress:
    """What the steps have found and made so far."""

    contained: list[Entry]  # the entries still on their way to a container
    client: docker.DockerClient | None = None
    cli: DockerCli | None = None
    host: HostFacts | None = None
    folders: dict[str, Path] = field(default_factory=dict)  # each contained entry's reports folder
    policy: BuildPolicy = TRUSTED
    uv: str = ""
    built: list[Built] = field(default_factory=list)
    statuses: list[int] = field(default_factory=list)
    ran: list[tuple[str, str, str, str]] = field(default_factory=list)  # entry, image, exit status, reports


Step = Callable[[Request, Progress], None]


def check_trust(request: Request, progress: Progress) -> None:
    """A test says its trust; an untrusted one runs no entry outside a container unless `--unsandboxed`."""
    tests = request.tests
    if tests is None:
        return
    trust = tests.trust
    print(f"torchyard: {trust.level} run ({trust.why})", file=sys.stderr, flush=True)
    bare = [entry.name for entry in progress.contained if tests.mode != "container" or entry.accelerator.native]
    if bare and not trust.trusted and not tests.unsandboxed:
        where = f"--{tests.mode}" if tests.mode != "container" else "a native entry"
        raise UsageError(
            f"an untrusted run ({trust.why}) does not run {', '.join(bare)} unsandboxed: {where} runs the "
            "project's code on this host, with its files and environment; pass --unsandboxed to run it anyway"
        )


def run_in_place_entries(request: Request, progress: Progress) -> None:
    """`--in-place`: every entry in this interpreter as it is, unlocked, and its report says so."""
    tests = request.tests
    if tests is None or tests.mode != "in-place":
        return
    for entry in progress.contained:
        status = run_in_place(
            entry, request.lockdir, tests.reports, tests.pytest_args, runner=request.runner, env=request.env
        )
        progress.statuses.append(held(entry, tests.reports / f"{entry.name}-in-place", status, request))
        summarize(tests.reports / f"{entry.name}-in-place", request.env)
    progress.contained = []


def run_native_entries(request: Request, progress: Progress) -> None:
    """Native entries (MPS; every entry with `--local`) run in a venv made from their lock, once the host is
    shown to have their device; a build names them and leaves them out: they have no image."""
    tests = request.tests
    local = tests is not None and tests.mode == "local"
    native = [entry for entry in progress.contained if entry.accelerator.native or local]
    progress.contained = [entry for entry in progress.contained if entry not in native]
    if tests is None:
        for entry in native:
            print(f"entry {entry.name!r} runs natively ({entry.accelerator.name}): there is no image to build")
        return
    if not local:
        host = gather_host_facts(None)
        for entry in native:
            require_device_runtime(entry, host, request.env)  # before the venv is made: fail fast, and say why
    for entry in native:
        status = run_local(
            entry, request.lockdir, tests.reports, tests.pytest_args, machine=request.machine,
            runner=request.runner, env=request.env,
        )  # fmt: skip
        progress.statuses.append(held(entry, tests.reports / f"{entry.name}-local", status, request))
        summarize(tests.reports / f"{entry.name}-local", request.env)


def check_devices(request: Request, progress: Progress) -> None:
    """Before any lock check or build, a test's engine, each entry's device and its reports folder (a
    committed link there is refused now): fail fast, and say why."""
    if request.tests is None:
        return
    try:
        progress.client = engine(request.env)
    except DockerUnavailableError as error:
        raise DockerUnavailableError(f"{error}{LOCAL_HINT}") from None
    progress.host = gather_host_facts(progress.client)
    check_limits(progress.contained, request.machine, progress.host.memory_bytes, trusted=request.tests.trust.trusted)
    for entry in progress.contained:
        require_device_runtime(entry, progress.host, request.env)
        progress.folders[entry.name] = reports_folder(request.tests.reports, entry.name)
    progress.cli = build_client(request.env, request.runner)


def check_limits(entries: Sequence[Entry], machine: Machine, engine_memory: int, *, trusted: bool = True) -> None:
    """A matrix.toml resource flag above this machine's limit, a flag that would end docker's options early, and
    for an untrusted run a flag that gives up the seal, each before any image is built for it (`run_entry`
    checks the whole command again against the plan it runs): a refused flag costs no image."""
    seal = Seal(machine.limits, default_memory(machine.limits, engine_memory, MEMORY_SHARE))
    for entry in entries:
        check_matrix_flags(entry, seal)
        check_untrusted_seal(entry.accelerator.docker_run, trusted)


def check_build_policy(request: Request, progress: Progress) -> None:
    """What this run's builds may do: an untrusted run publishes nothing, and `--push` needs a registry."""
    progress.policy = build_policy(request.env, allowed_docker_run=request.machine.allowed_docker_run)
    if request.options.push and not progress.policy.trusted:
        raise ImageBuildError("an untrusted run does not push images: only trusted runs publish to the registry")
    if request.options.push and request.machine.registry is None:
        raise ImageBuildError(NO_REGISTRY)  # before any lock check or layer


def check_locks(request: Request, progress: Progress) -> None:
    """Every lock fresh, checked offline: a missing or stale lock stops before anything is built."""
    progress.uv = uv_version(request.runner)
    for entry in progress.contained:
        require_fresh(entry, request.lockdir, progress.uv)


def _git(request: Request, args: Sequence[str], fallback: str) -> str:
    """A fact of the checkout holding the locks (through `torchyard.util.git`, the one seam git runs through)."""

    def text_runner(
        args: Sequence[str], *, cwd: Path | None = None, stdin: bytes = b"", env: Mapping[str, str] | None = None
    ) -> bytes:
        return request.runner(args, capture=True, cwd=cwd, env=env).stdout.encode()

    return head_fact(request.lockdir, args, fallback, runner=text_runner)


def build_or_reuse_images(request: Request, progress: Progress) -> None:
    """Each entry's image (`image.obtain`), with this machine's registry, base overrides and mirrors."""
    inputs = Inputs(
        request.lockdir, request.project, progress.uv, revision=_git(request, ["rev-parse", "HEAD"], "unknown"),
        source_date_epoch=_git(request, ["log", "-1", "--format=%ct"], "0"),
    )  # fmt: skip
    client = progress.client = progress.client or engine(request.env)
    cli = progress.cli = progress.cli or build_client(request.env, request.runner)
    for position, entry in enumerate(progress.contained, start=1):
        image = obtain_image(
            entry, inputs, machine=request.machine, client=client, cli=cli, options=request.options,
            policy=progress.policy, runner=request.runner, env=request.env,
            position=f"[{position}/{len(progress.contained)}]",
        )  # fmt: skip
        progress.built.append(image)


def publish_images(request: Request, progress: Progress) -> None:
    """`--push`: every entry's image, found or built, to the machine's registry (a trusted run's only:
    `check_build_policy`), once every image of the run exists."""
    if not request.options.push or progress.client is None:
        return
    client = progress.client
    progress.built = [
        replace(image, pushed=publish(client, request.machine.registry, (image.tag, image.alias), request.env))
        for image in progress.built
    ]


def summarize_images(request: Request, progress: Progress) -> None:
    """The images' table on stdout and in GitHub's step summary, which leaves out those found on this runner
    unless `summarize_found` (a test's images were built, and summarized, by the build step before it)."""
    sys.stdout.write(images_markdown(progress.built))
    announced = [image for image in progress.built if request.summarize_found or image.origin != "local"]
    if announced:
        append_step_summary(f"### torchyard images\n\n{images_markdown(announced)}", request.env)


def run_containers(request: Request, progress: Progress) -> None:
    """Each entry's suites in its image, sealed; its reports are handed back as its container ends (the
    hand-back is the run's `finally`), and its parity table goes into the step summary."""
    tests, client, host, cli = request.tests, progress.client, progress.host, progress.cli
    if tests is None or client is None or host is None or cli is None:
        return
    memory = default_memory(request.machine.limits, host.memory_bytes, MEMORY_SHARE)
    for entry, image in zip(progress.contained, progress.built, strict=True):
        plan = plan_run(
            entry, image.tag, client=client, reports=progress.folders[entry.name], project=request.project,
            trust=tests.trust, machine=request.machine, memory=memory, env=request.env,
            matrix_tag=request.matrix_tag,
        )  # fmt: skip
        print(
            f"running {entry.name} in {plan.name} ({tests.trust.level}; cache {plan.scope.volume}); reports in "
            f"{plan.reports}",
            file=sys.stderr,
            flush=True,
        )
        status = run_entry(
            entry, plan, client=client, docker_path=cli.path, host=host, pytest_args=tests.pytest_args,
            keep=tests.keep, runner=request.runner, env=request.env,
        )  # fmt: skip
        status = held(entry, plan.reports, status, request)
        progress.statuses.append(status)
        progress.ran.append((entry.name, image.tag, str(status), str(plan.reports)))
        summarize(plan.reports, request.env)


def held(entry: Entry, folder: Path, status: int, request: Request) -> int:
    """The run in `folder` held to its baseline (`reports.baseline`), its reports final: what changed written into
    them; the run's status, or 1 where it passed and a change its entry's `fail-on-change` names was found."""
    tests = request.tests
    assert tests is not None
    changed = hold_to_baseline(
        entry.name, folder, named=tests.baseline, store=store_for(request.project, request.env),
        trusted=tests.trust.trusted, fail_on=entry.fail_on_change, key=folder.name + request.matrix_tag,
        keep=not tests.pytest_args and tests.baseline is None,  # the entry's whole run, as its suites ran it
        narrowed=" ".join(tests.pytest_args),
    )  # fmt: skip
    return status or changed


def summarize_runs(request: Request, progress: Progress) -> None:
    """The containers' table on stdout and in the step summary: each entry's image, exit status and reports
    (the host's word on each run, beside the parity tables the runs wrote: a failed self-test or a suite
    that passed nothing fails a run whose table shows no failure)."""
    if request.tests is not None:
        table = markdown_table(("entry", "image", "exit status", "reports"), progress.ran)
        sys.stdout.write(table)
        if progress.ran:
            append_step_summary(f"### torchyard runs\n\n{table}", request.env)


STEPS: tuple[Step, ...] = (
    check_trust,
    run_in_place_entries,
    run_native_entries,
    check_devices,
    check_build_policy,
    check_locks,
    build_or_reuse_images,
    publish_images,
    summarize_images,
    run_containers,
    summarize_runs,
)
BUILD_STEPS = STEPS[: STEPS.index(summarize_images) + 1]


def execute(steps: Sequence[Step], request: Request, progress: Progress | None = None) -> Progress:
    """Each step in turn, until no entry is left for a container."""
    progress = progress or Progress(list(request.entries))
    for step in steps:
        step(request, progress)
        if not progress.contained:
            break
    return progress


def first_failure(statuses: Sequence[int]) -> int:
    return next((status for status in statuses if status), 0)


def build_images(
    entries: Sequence[Entry],
    lockdir: Path,
    options: BuildOptions,
    *,
    machine: Machine,
    project: str,
    client: docker.DockerClient | None = None,
    cli: DockerCli | None = None,
    runner: proc.Runner = proc.run,
    env: Mapping[str, str] = os.environ,
    summarize_found: bool = True,
) -> list[Built]:
    """The build's steps for `entries`, their images named for `project` (`client` and `cli` are found when not
    given): their images."""
    request = Request(tuple(entries), lockdir, machine, project, runner, env, options, summarize_found=summarize_found)
    return execute(BUILD_STEPS, request, Progress(list(entries), client=client, cli=cli)).built


def run_tests(
    entries: Sequence[Entry],
    *,
    mode: Mode,
    lockdir: Path,
    reports: Path,
    pytest_args: Sequence[str],
    machine: Machine,
    trust: RunTrust,
    keep: bool = False,
    project: str = "",
    unsandboxed: bool = False,
    baseline: Path | None = None,
    runner: proc.Runner = proc.run,
    env: Mapping[str, str] = os.environ,
    matrix: Path = Path(MATRIX),
) -> int:
    """Every step for `entries` of `matrix` (`project`: its folder's when not given); the first non-zero status is
    the result (all entries still run)."""
    tests = Tests(mode, reports, pytest_args, trust, keep, unsandboxed, baseline)
    project = project or project_scope(matrix, env)
    request = Request(
        tuple(entries), lockdir, machine, project, runner, env, tests=tests, summarize_found=False,
        matrix_tag=matrix_tag(matrix),
    )  # fmt: skip
    return first_failure(execute(STEPS, request).statuses)
