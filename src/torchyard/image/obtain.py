"""An entry's image, wherever it comes from: this runner, the registry, or a build of its own, asked in that
order.

The one place that decides which: a trusted run reuses or builds its plan's image; an untrusted run uses the
image a trusted run made from the same inputs as it is, else its own (under its own tag, standing on the
trusted dependency image of the same pins when this runner has one): no trusted run reuses what it made.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import docker

from torchyard.host.engine import DockerCli
from torchyard.image.build import build_image
from torchyard.image.held import base_identity, find_local, look, trusted_dependencies
from torchyard.image.outcome import Built
from torchyard.image.plan import BuildOptions, plan_build, resolve_base
from torchyard.image.policy import BuildPolicy
from torchyard.image.registry import pull_image
from torchyard.matrix.machine import Machine
from torchyard.matrix.schema import Entry
from torchyard.util import proc


@dataclass(frozen=True)
class Inputs:
    """What every entry's plan in one run shares: the locks, the project, uv, the checkout's commit."""

    lockdir: Path
    project: str
    uv_version: str
    revision: str
    source_date_epoch: str


def obtain_image(
    entry: Entry,
    inputs: Inputs,
    *,
    machine: Machine,
    client: docker.DockerClient,
    cli: DockerCli,
    options: BuildOptions,
    policy: BuildPolicy,
    runner: proc.Runner,
    env: Mapping[str, str],
    position: str = "",
) -> Built:
    """`entry`'s image: found on this runner, pulled by its content-addressed tag, or built; `position`
    (`[1/3]`) leads its progress line. Publishing (`--push`) is the pipeline's next step."""
    base = resolve_base(entry, machine.base_overrides)
    planned = functools.partial(
        plan_build, entry, inputs.lockdir, project=inputs.project, base_image=base,
        base_id=base_identity(base, client) or entry.accelerator.require_base_image().digest,
        uv_version=inputs.uv_version, revision=inputs.revision, source_date_epoch=inputs.source_date_epoch,
    )  # fmt: skip
    plans = [planned()]
    print(f"{position} {entry.name}: {plans[0].tag}".lstrip(), file=sys.stderr, flush=True)
    stands_on = None
    if not policy.trusted:
        # The image a trusted run made from the same inputs, as it is; else its own, standing on the dependency
        # image a trusted build of the same pins left, when there is one: then it installs nothing of the lock
        # (no sdist to refuse, no cache to scope).
        stands_on = trusted_dependencies(client, plans[0])
        plans.append(planned(policy=policy, stands_on=stands_on))
    found = find_local(entry, plans, client, policy=policy)
    if found is not None:
        return found
    held = look(client, plans[-1])
    pulled = pull_image(entry, plans, client, machine.registry, env, policy=policy)
    if pulled is not None:
        return pulled
    if stands_on is not None:
        print(f"{entry.name}: untrusted, on the trusted dependency image {stands_on[0]}", file=sys.stderr)
    sources = machine.install_sources(entry.indexes)
    return build_image(
        entry, plans[-1], client, cli, held=held, options=options, registry=machine.registry, policy=policy,
        sources=sources, runner=runner, env=env,
    )  # fmt: skip
