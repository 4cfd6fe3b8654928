"""`torchyard test`: per entry, lock check, image (built if needed), suites in a container, reports back.

Native entries (MPS) and `--local` run the same suites on this machine in a venv made from the lock, no
Docker; `--in-place` runs them in the current environment, unlocked, and the report says so.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Literal

from torchyard import contract
from torchyard.commands.build import build_images
from torchyard.errors import ConfigError, DockerUnavailableError, UsageError
from torchyard.host.engine import build_client, engine
from torchyard.host.facts import gather_host_facts
from torchyard.image.plan import BuildOptions
from torchyard.matrix.machine import MEMORY_SHARE, Limits, Machine, duration_seconds
from torchyard.matrix.schema import Entry
from torchyard.run.container import (
    RunPlan,
    container_name,
    require_device_runtime,
    run_entry,
)
from torchyard.run.handback import read_report, reports_folder
from torchyard.run.inplace import run_in_place
from torchyard.run.scopes import cache_scope
from torchyard.run.venv import run_local
from torchyard.seal import Seal, default_memory, run_user
from torchyard.trust import TRUST_ENV, RunTrust, project_scope, resolve_trust
from torchyard.util import proc
from torchyard.util.markdown import append_step_summary, markdown_table

LOCAL_HINT = "; `nox -s test-cpu -- --local` runs the suites without Docker"


def _summarize(report_dir: Path, env: Mapping[str, str]) -> None:
    """The run's parity table into GitHub's step summary (the one place that appends to it)."""
    table = read_report(report_dir / contract.PARITY_MARKDOWN)
    if table is not None:
        append_step_summary(table, env)


Mode = Literal["container", "local", "in-place"]


def test_entries(
    entries: Sequence[Entry],
    *,
    mode: Mode,
    lockdir: Path,
    reports: Path,
    pytest_args: Sequence[str],
    machine: Machine,
    keep: bool = False,
    trust: RunTrust | None = None,
    project: str = "",
    unsandboxed: bool = False,
    runner: proc.Runner = proc.run,
    env: Mapping[str, str] = os.environ,
) -> int:
    """Run every selected entry; the first non-zero status is the result (all entries still run).

    `container` runs each entry in its image, except native ones (MPS), which run in a venv made from
    their lock once the host is shown to have their device; `local` runs every entry in such a venv;
    `in-place` runs in the current environment, unlocked, and says so in the report. `trust` (resolved from
    the environment when not given) decides the cache scope; an untrusted run is refused outside a
    container unless `unsandboxed`. `machine` gives the limits, mirrors and what this machine allows.
    """
    trust = trust or resolve_trust(None, env)
    env = {**env, TRUST_ENV: trust.level}
    print(f"torchyard: {trust.level} run ({trust.why})", file=sys.stderr, flush=True)
    bare = [entry.name for entry in entries if mode != "container" or entry.accelerator.native]
    if bare and not trust.trusted and not unsandboxed:
        where = f"--{mode}" if mode != "container" else "a native entry"
        raise UsageError(
            f"an untrusted run ({trust.why}) does not run {', '.join(bare)} unsandboxed: {where} runs the "
            "project's code on this host, with its files and environment; pass --unsandboxed to run it anyway"
        )
    if mode == "in-place":
        statuses = []
        for entry in entries:
            statuses.append(run_in_place(entry, lockdir, reports, pytest_args, runner=runner, env=env))
            _summarize(reports / f"{entry.name}-in-place", env)
        return _first_failure(statuses)
    native = [entry for entry in entries if entry.accelerator.native or mode == "local"]
    if mode == "container":
        host = gather_host_facts(None)
        for entry in native:
            require_device_runtime(entry, host, env)  # before the venv is made: fail fast, and say why
    statuses = []
    for entry in native:
        statuses.append(run_local(entry, lockdir, reports, pytest_args, machine=machine, runner=runner, env=env))
        _summarize(reports / f"{entry.name}-local", env)
    contained = [entry for entry in entries if entry not in native]
    if contained:
        scope = project or project_scope(Path("matrix.toml"), env)
        status = _in_containers(
            contained, lockdir, reports, pytest_args, machine=machine, keep=keep, trust=trust, project=scope,
            runner=runner, env=env,
        )  # fmt: skip
        statuses.append(status)
    return _first_failure(statuses)


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


def _timeout(entry: Entry, limits: Limits) -> int:
    wanted, cap = duration_seconds(entry.timeout), duration_seconds(limits.timeout)
    if wanted > cap:
        print(f"torchyard: entry {entry.name!r}: timeout {entry.timeout} capped at this machine's {limits.timeout}")
    return min(wanted, cap)


def _first_failure(statuses: Sequence[int]) -> int:
    return next((status for status in statuses if status), 0)


def _in_containers(
    entries: Sequence[Entry],
    lockdir: Path,
    reports: Path,
    pytest_args: Sequence[str],
    *,
    machine: Machine,
    keep: bool,
    trust: RunTrust,
    project: str,
    runner: proc.Runner,
    env: Mapping[str, str],
) -> int:
    try:
        client = engine(env)
    except DockerUnavailableError as error:
        raise DockerUnavailableError(f"{error}{LOCAL_HINT}") from None
    host = gather_host_facts(client)
    folders = {}
    for entry in entries:
        require_device_runtime(entry, host, env)  # before any lock check or build: fail fast, and say why
        folders[entry.name] = reports_folder(reports, entry.name)  # a committed link there: refused, now
    cli = build_client(env, runner)
    built = build_images(
        entries, lockdir, BuildOptions(), machine=machine, client=client, cli=cli, runner=runner, env=env,
        summarize_found=False,
    )  # fmt: skip
    rows = []
    limits = machine.limits
    memory = default_memory(limits, host.memory_bytes, MEMORY_SHARE)
    for entry, image in zip(entries, built, strict=True):
        name = container_name(entry)
        plan = RunPlan(
            entry=entry.name,
            image=image.tag,
            name=name,
            reports=folders[entry.name],
            scope=cache_scope(entry, project, trust.level, name.rsplit("-", 1)[-1]),
            user=run_user(os.getuid(), os.getgid()),
            seal=Seal(limits, memory, network=_network(entry, trust, machine)),
            image_id=str(client.images.get(image.tag).id),
            timeout_s=_timeout(entry, limits),
        )
        print(
            f"running {entry.name} in {plan.name} ({trust.level}; cache {plan.scope.volume}); reports in "
            f"{plan.reports}",
            file=sys.stderr,
            flush=True,
        )
        status = run_entry(
            entry, plan, client=client, docker_path=cli.path, host=host, pytest_args=pytest_args, keep=keep,
            runner=runner, env=env,
        )  # fmt: skip
        rows.append((entry.name, image.tag, str(status), str(plan.reports)))
        _summarize(plan.reports, env)
    sys.stdout.write(markdown_table(("entry", "image", "exit status", "reports"), rows))
    return next((int(row[2]) for row in rows if row[2] != "0"), 0)
