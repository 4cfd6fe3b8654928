"""`torchyard test`: per entry, lock check, image (built if needed), suites in a container, reports back.

`--local` runs the same suites on this machine in a venv made from the lock, no Docker.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from torchyard import cmd
from torchyard.buildcmd import build_images
from torchyard.engine import build_client, engine
from torchyard.errors import DockerUnavailableError
from torchyard.hostfacts import gather_host_facts
from torchyard.image import BuildOptions
from torchyard.local import run_local
from torchyard.markdown import append_step_summary, markdown_table
from torchyard.matrix.schema import Entry
from torchyard.run import RunPlan, container_name, inductor_volume, require_device_runtime, run_entry, run_user

LOCAL_HINT = "; `nox -s test-cpu -- --local` runs the suites without Docker"


def test_entries(
    entries: Sequence[Entry],
    *,
    local: bool,
    lockdir: Path,
    reports: Path,
    pytest_args: Sequence[str],
    keep: bool = False,
    runner: cmd.Runner = cmd.run,
    env: Mapping[str, str] = os.environ,
) -> int:
    """Run every selected entry; the first non-zero status is the result (all entries still run)."""
    if local:
        statuses = [run_local(entry, lockdir, reports, pytest_args, runner=runner, env=env) for entry in entries]
        return next((status for status in statuses if status), 0)
    try:
        client = engine(env)
    except DockerUnavailableError as error:
        raise DockerUnavailableError(f"{error}{LOCAL_HINT}") from None
    host = gather_host_facts(client)
    for entry in entries:
        require_device_runtime(entry, host)  # before any lock check or build: fail fast, and say why
    cli = build_client(env, runner)
    built = build_images(entries, lockdir, BuildOptions(), client=client, cli=cli, runner=runner, env=env)
    rows = []
    for entry, image in zip(entries, built, strict=True):
        plan = RunPlan(
            entry=entry.name,
            image=image.tag,
            name=container_name(entry),
            source=Path.cwd(),
            reports=(reports / entry.name).resolve(),
            volume=inductor_volume(entry),
            user=run_user(os.getuid(), os.getgid()),
        )
        print(f"running {entry.name} in {plan.name}; reports in {plan.reports}", file=sys.stderr, flush=True)
        status = run_entry(
            entry, plan, client=client, docker_path=cli.path, host=host, pytest_args=pytest_args, keep=keep,
            runner=runner, env=env,
        )  # fmt: skip
        rows.append((entry.name, image.tag, str(status), str(plan.reports)))
        table = plan.reports / "parity.md"
        if table.is_file():
            append_step_summary(table.read_text(encoding="utf-8"), env)
    sys.stdout.write(markdown_table(("entry", "image", "exit status", "reports"), rows))
    return next((int(row[2]) for row in rows if row[2] != "0"), 0)
