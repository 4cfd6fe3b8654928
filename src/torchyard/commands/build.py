"""`torchyard build` and `torchyard base`: build the selected entries' images; make the local base."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

import docker

from torchyard.errors import CommandError, ImageBuildError
from torchyard.host.engine import DockerCli, build_client, engine
from torchyard.image.build import build_image
from torchyard.image.debootstrap import DEFAULT_TAG, bootstrap_base
from torchyard.image.outcome import Built, images_markdown
from torchyard.image.plan import BuildOptions, plan_build, resolve_base
from torchyard.image.policy import build_policy
from torchyard.image.reuse import NO_REGISTRY, base_identity, reuse_image, trusted_dependencies
from torchyard.lock.check import require_fresh
from torchyard.lock.resolve import uv_version
from torchyard.matrix.machine import Machine
from torchyard.matrix.schema import Entry
from torchyard.util import proc
from torchyard.util.markdown import append_step_summary


def _git(args: Sequence[str], runner: proc.Runner, fallback: str) -> str:
    try:
        return runner(["git", *args], capture=True).stdout.strip() or fallback
    except (CommandError, OSError):
        return fallback


def build_images(
    entries: Sequence[Entry],
    lockdir: Path,
    options: BuildOptions,
    *,
    machine: Machine,
    client: docker.DockerClient | None = None,
    cli: DockerCli | None = None,
    runner: proc.Runner = proc.run,
    env: Mapping[str, str] = os.environ,
    summarize_found: bool = True,
) -> list[Built]:
    """Build (or reuse) each entry's image, with this `machine`'s registry, base overrides and mirrors;
    `client` and `cli` are found when not given. GitHub's step summary gets a table of the images, leaving
    out those found on this runner unless `summarize_found` (the test command's images were built, and
    summarized, by the build step before it).

    Every lock is checked first (offline): a missing or stale lock stops before Docker is touched. Native
    entries (MPS) have no image: they are named and left out.
    """
    for entry in entries:
        if entry.accelerator.native:
            print(f"entry {entry.name!r} runs natively ({entry.accelerator.name}): there is no image to build")
    entries = [entry for entry in entries if not entry.accelerator.native]
    if not entries:
        return []
    policy = build_policy(env, allowed_docker_run=machine.allowed_docker_run)
    if options.push and not policy.trusted:
        raise ImageBuildError("an untrusted run does not push images: only trusted runs publish to the registry")
    registry = machine.registry
    if options.push and registry is None:
        raise ImageBuildError(NO_REGISTRY)  # before any lock check or layer
    uv = uv_version(runner)
    for entry in entries:
        require_fresh(entry, lockdir, uv)
    client = client or engine(env)
    cli = cli or build_client(env, runner)
    revision = _git(["rev-parse", "HEAD"], runner, "unknown")
    epoch = _git(["log", "-1", "--format=%ct"], runner, "0")
    built = []
    for position, entry in enumerate(entries, start=1):
        base = resolve_base(entry, machine.base_overrides)
        base_id = base_identity(base, client) or entry.accelerator.require_base_image().digest
        plan = plan_build(
            entry, lockdir, base_image=base, base_id=base_id, uv_version=uv, revision=revision,
            source_date_epoch=epoch,
        )  # fmt: skip
        print(f"[{position}/{len(entries)}] {entry.name}: {plan.tag}", file=sys.stderr, flush=True)
        # An untrusted run uses the image a trusted run built from the same inputs, else builds one of its
        # own (under its own tag: no trusted run ever reuses what an untrusted build made).
        image = None if policy.trusted else reuse_image(entry, plan, client, registry=registry, env=env, policy=policy)
        if image is None and not policy.trusted:
            # It stands on the dependency image a trusted build of the same pins left, when there is one:
            # then it installs nothing of the lock (no sdist to refuse, no cache to scope).
            stands_on = trusted_dependencies(client, plan)
            plan = plan_build(
                entry, lockdir, base_image=base, base_id=base_id, uv_version=uv, revision=revision,
                source_date_epoch=epoch, policy=policy, stands_on=stands_on,
            )  # fmt: skip
            if stands_on is not None:
                print(f"{entry.name}: untrusted, on the trusted dependency image {stands_on[0]}", file=sys.stderr)
        if image is None:
            image = build_image(
                entry, plan, client, cli, options=options, registry=registry, policy=policy,
                sources=machine.install_sources(entry.indexes), runner=runner, env=env,
            )  # fmt: skip
        built.append(image)
    sys.stdout.write(images_markdown(built))
    announced = [image for image in built if summarize_found or image.origin != "local"]
    if announced:
        append_step_summary(f"### torchyard images\n\n{images_markdown(announced)}", env)
    return built


def make_base(
    tag: str = DEFAULT_TAG,
    *,
    suite: str = "bookworm",
    runner: proc.Runner = proc.run,
    env: Mapping[str, str] = os.environ,
) -> str:
    engine(env)
    image_id = bootstrap_base(build_client(env, runner), tag=tag, suite=suite, runner=runner, env=env)
    print(f"{tag} {image_id}\nuse it for the cpu entry on this machine: export TORCHYARD_BASE_IMAGES=cpu={tag}")
    return image_id
