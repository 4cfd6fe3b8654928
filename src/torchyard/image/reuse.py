"""What this runner or the registry already holds: an entry's image (found, or pulled by its content-addressed
tag), the dependency image of its pins, a base's identity; and publishing an image to the registry."""

from __future__ import annotations

import os
import time
from collections.abc import Mapping

import docker
import docker.errors
from docker.models.images import Image

from torchyard.errors import ImageBuildError
from torchyard.image.outcome import Built, Origin
from torchyard.image.plan import BuildOptions, BuildPlan, trusted_alias_of
from torchyard.image.policy import BuildPolicy
from torchyard.image.registry import DIGEST, Transfer, pull, push
from torchyard.matrix.machine import Registry
from torchyard.matrix.schema import Entry

NO_OPTIONS = BuildOptions()
TRUSTED = BuildPolicy()
NO_REGISTRY = "--push needs a registry: set TORCHYARD_REGISTRY (host[:port]/path) or [registry] name in machine.toml"


def local_image(client: docker.DockerClient, name: str) -> Image | None:
    try:
        return client.images.get(name)
    except docker.errors.ImageNotFound:
        return None


def dependency_image(client: docker.DockerClient, plan: BuildPlan) -> Image | None:
    """The dependency image of `plan`'s pins that a trusted build tagged on this runner, if any."""
    return local_image(client, plan.dependency_tag) if plan.dependency_tag else None


def trusted_dependencies(client: docker.DockerClient, plan: BuildPlan) -> tuple[str, str] | None:
    """That dependency image's tag and ID, for an untrusted build to stand on."""
    image = dependency_image(client, plan)
    return (plan.dependency_tag, str(image.id)) if image is not None else None


def base_identity(base: str, client: docker.DockerClient) -> str | None:
    """What the base contributes to the image's tag: its pinned digest when the reference has one (the
    same on every runner, pulled or not), else the local image's ID (a per-machine base)."""
    _, _, digest = base.partition("@")
    if DIGEST.fullmatch(digest):
        return digest
    local = client.images.list(name=base)
    return local[0].id if local else None


def cache_sources(plan: BuildPlan, options: BuildOptions, registry: Registry | None, local_alias: bool) -> BuildOptions:
    """Where the build may take layers from: what the caller named, else this runner's last trusted image of
    the entry and the registry's (its layer cache travels inline with it). Never an untrusted alias: one pull
    request's layers would feed the next one's build."""
    if options.cache_from:
        return options
    trusted_alias = trusted_alias_of(plan)
    sources = [trusted_alias] if local_alias else []
    if registry is not None:
        sources.append(registry.ref(trusted_alias))
    return BuildOptions(options.push, tuple(sources), options.cache_to)


def publish(
    client: docker.DockerClient, registry: Registry | None, image: Image, plan: BuildPlan, env: Mapping[str, str]
) -> tuple[Transfer, ...]:
    """Push the content-addressed tag and the entry's alias to the machine's registry."""
    if registry is None:
        raise ImageBuildError(NO_REGISTRY)
    transfers = []
    for local in (plan.tag, plan.alias):
        repository, _, tag = registry.ref(local).rpartition(":")
        image.tag(repository, tag)
        transfers.append(push(client, registry, registry.ref(local), env))
    return tuple(transfers)


def reuse_image(
    entry: Entry,
    plan: BuildPlan,
    client: docker.DockerClient,
    *,
    options: BuildOptions = NO_OPTIONS,
    registry: Registry | None = None,
    env: Mapping[str, str] = os.environ,
    policy: BuildPolicy = TRUSTED,
) -> Built | None:
    """`plan`'s image when this runner has it, or pulled from the registry by its content-addressed tag;
    None when it would have to be built. An untrusted run uses a trusted image as it is, and moves no tag
    of it (the alias a trusted build reads stays where trusted builds put it)."""
    started = time.monotonic()
    existing = local_image(client, plan.tag)
    origin: Origin = "local"
    pulled = None
    if existing is None and registry is not None:
        pulled = pull(client, registry, registry.ref(plan.tag), env)
        if pulled is not None:
            existing = client.images.get(registry.ref(plan.tag))
            existing.tag(plan.tag)
            origin = "pulled"
    if existing is None:
        return None
    if policy.trusted:
        existing.tag(plan.alias)
    pushed = publish(client, registry, existing, plan, env) if options.push else ()
    seconds = time.monotonic() - started
    return Built(entry.name, plan.tag, existing.attrs["Size"], seconds, origin, pushed, pulled)
