"""Before a build's first layer: the base has the entry's Python, and the engine's disk can hold the build."""

from __future__ import annotations

import itertools
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path

import docker
import docker.errors
from docker.models.images import Image

from torchyard.errors import ImageBuildError
from torchyard.image.layers import LAYERS_LABEL, Layer, history_layers, image_keys
from torchyard.image.plan import BuildPlan
from torchyard.image.reuse import local_image

BASE_DIGEST_LABEL = "org.opencontainers.image.base.digest"


def check_base(client: docker.DockerClient, plan: BuildPlan, last: Image | None) -> None:
    """The base has the entry's Python, or apt to install it (vendor bases: Python). A container is started
    to look, except where this entry's `last` image was built from this very base (its label says so): that
    build found it, and a source-only rebuild need not look again."""
    if local_image(client, plan.base_image) is None:
        return  # pulled by the build; it checks Python itself in the first step
    base_digest = dict(plan.build_args).get("BASE_DIGEST", "")
    if last is not None and base_digest and (last.labels or {}).get(BASE_DIGEST_LABEL) == base_digest:
        return
    python = f"python{plan.python}"
    probe = f"command -v {python}" if plan.vendor else f"command -v {python} || command -v apt-get"
    try:
        client.containers.run(plan.base_image, ["/bin/sh", "-c", probe], remove=True, entrypoint=[])
    except docker.errors.ContainerError:
        needs = python if plan.vendor else f"{python} and no apt-get to install it"
        raise ImageBuildError(f"entry {plan.entry!r}: base image {plan.base_image} has no {needs}") from None


def needs_more_than_free(need: int, free: int) -> bool:
    """A build that needs about `need` bytes leaves a margin."""
    return need > 0 and free < need + (2 << 30)


def rebuilt_bytes(history: Sequence[Mapping[str, object]], size: int, kept: Sequence[str]) -> int:
    """What a new build of an entry writes, estimated from its last image: the bytes of that image's
    layers above the last dependency group the new build keeps (`kept`: the groups, in install order,
    whose keys match; their layers are reused), or the whole image when it keeps none."""
    if not kept:
        return size
    above = 0
    for group, layer_size in history_layers(history):
        if group == kept[-1]:
            return above
        above += layer_size
    return size  # the group's layer is not in the history: reuse cannot be assumed


def kept_groups(groups: Sequence[Layer], had: Mapping[str, str]) -> list[str]:
    """The dependency groups (in install order) a build of `groups` takes from an image whose layers are `had`
    (`image_keys`): those up to the first whose key differs (keys chain, so a layer above it is new too)."""
    return [layer.name for layer in itertools.takewhile(lambda layer: had.get(layer.name) == layer.key, groups)]


def check_free_disk(client: docker.DockerClient, plan: BuildPlan, last: Image | None) -> None:
    """Stop with the fix when the engine's disk cannot hold what this build adds to the image on the engine it
    shares the most layers with: the entry's `last` image, or any other torchyard image built on the same
    dependency layers (a second entry on the first one's lock adds only its source layers)."""
    root = Path(str(client.info().get("DockerRootDir", "")))
    if last is None or not root.is_dir():
        return  # nothing to estimate from, or a remote engine whose disk this host cannot see
    groups = [layer for layer in plan.layers if layer.pins]
    need = rebuilt_bytes(last.history(), _size(last), kept_groups(groups, image_keys(last.labels)))
    for image in client.images.list(filters={"label": LAYERS_LABEL}):
        kept = kept_groups(groups, image_keys(image.labels))
        if kept and image.id != last.id:
            need = min(need, rebuilt_bytes(image.history(), _size(image), kept))
    free = shutil.disk_usage(root).free
    if needs_more_than_free(need, free):
        raise ImageBuildError(
            f"entry {plan.entry!r}: the build needs about {need / 1e9:.1f} GB and {root} has "
            f"{free / 1e9:.1f} GB free: run `torchyard prune` (`nox -s prune`), then build again"
        )


def _size(image: Image) -> int:
    return int(image.attrs.get("Size", 0))
