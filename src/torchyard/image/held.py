"""What this runner's engine holds for an entry's plans, read before anything is pulled or built: the plan's
image, the base's identity, and what a build reads (its last image, the trusted alias, the dependency image of
its pins, every torchyard image's layer keys)."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import docker
import docker.errors
from docker.models.images import Image

from torchyard.image.layers import LAYERS_LABEL, image_keys
from torchyard.image.outcome import Built
from torchyard.image.plan import BuildPlan, trusted_alias_of
from torchyard.image.policy import TRUSTED, BuildPolicy
from torchyard.image.registry import DIGEST, plan_mismatch
from torchyard.matrix.schema import Entry


def local_image(client: docker.DockerClient, name: str) -> Image | None:
    try:
        return client.images.get(name)
    except docker.errors.ImageNotFound:
        return None


def base_identity(base: str, client: docker.DockerClient) -> str | None:
    """What the base contributes to the image's tag: its pinned digest when the reference has one (the
    same on every runner, pulled or not), else the local image's ID (a per-machine base)."""
    _, _, digest = base.partition("@")
    if DIGEST.fullmatch(digest):
        return digest
    local = client.images.list(name=base)
    return local[0].id if local else None


def trusted_dependencies(client: docker.DockerClient, plan: BuildPlan) -> tuple[str, str] | None:
    """The dependency image of `plan`'s pins that a trusted build tagged on this runner (its tag and ID), for
    an untrusted build to stand on."""
    image = local_image(client, plan.dependency_tag) if plan.dependency_tag else None
    return (plan.dependency_tag, str(image.id)) if image is not None else None


@dataclass(frozen=True)
class Held:
    """What a build of one plan reads from the engine, looked up once before its first layer."""

    base: bool  # the base is on this engine (else the build pulls it, and checks its Python itself)
    last: Image | None  # the entry's last image of this trust: what the base and disk checks read
    trusted_alias: bool  # the entry's last trusted image, whose layers a build may take
    dependency: bool  # the dependency image of the plan's pins, tagged by a trusted build
    labelled: tuple[Image, ...]  # every torchyard image that labels its dependency layers
    root: Path | None  # the engine's data folder, where this host can see it (not a remote engine's)

    @property
    def layer_keys(self) -> frozenset[str]:
        """The dependency layers this runner's torchyard images hold, by key (their label)."""
        return frozenset(key for image in self.labelled for key in image_keys(image.labels).values())


def look(client: docker.DockerClient, plan: BuildPlan) -> Held:
    """What the engine holds for a build of `plan`."""
    root = Path(str(client.info().get("DockerRootDir", "")))
    return Held(
        base=local_image(client, plan.base_image) is not None,
        last=local_image(client, plan.alias),
        trusted_alias=local_image(client, trusted_alias_of(plan)) is not None,
        dependency=bool(plan.dependency_tag) and local_image(client, plan.dependency_tag) is not None,
        labelled=tuple(client.images.list(filters={"label": LAYERS_LABEL})),
        root=root if root.is_dir() else None,
    )


def find_local(
    entry: Entry, plans: Sequence[BuildPlan], client: docker.DockerClient, *, policy: BuildPolicy = TRUSTED
) -> Built | None:
    """The first of `plans`' images this runner has, by its content-addressed tag and labels that say it is
    the plan's (the whole content digest, who built it); None when none is here. An untrusted run uses a
    trusted image as it is, and moves no tag of it (the alias a trusted build reads stays where trusted builds
    put it)."""
    for plan in plans:
        existing = local_image(client, plan.tag)
        if existing is None:
            continue
        mismatch = plan_mismatch(existing.labels, plan)
        if mismatch:  # made by something else under the plan's tag: rebuilt, never run
            print(
                f"torchyard: {plan.tag} on this runner is not what its plan builds (its {mismatch} label differs): "
                "not used; building it",
                file=sys.stderr,
            )
            continue
        if policy.trusted:
            existing.tag(plan.alias)
        return Built(entry.name, plan.tag, existing.attrs["Size"], 0.0, "local", alias=plan.alias)
    return None
