"""`torchyard prune`: give a runner's disk back, removing exactly torchyard's own leftovers (what carries its
`dev.torchyard.entry` label): stopped containers it started; images beyond the newest `keep` per project and
entry (the one the entry's alias names, which its last build or run used, counts as newest; never one a
container uses), untagged ones and ones named before per-project names; dependency images no
kept image holds the layers of; cache volumes of an entry with no image left, untrusted runs' volumes and
volumes from before scopes; BuildKit's build cache beyond `--keep-storage`. docs/concepts/flow.md says why
each. Each image removed is shown with the bytes only it holds; the disk given back is measured.

The decision (`plan_prune`) is pure; `--dry-run` prints it without removing anything.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import docker
import docker.errors

from torchyard.host.engine import engine
from torchyard.image.layers import image_keys
from torchyard.image.plan import ALIASES, DEPENDENCY_REPOSITORY
from torchyard.run.scopes import DEADLINE_LABEL, SCOPE_LABEL, TRUST_LABEL
from torchyard.run.staging import abandoned, staging_root, sweep_stages
from torchyard.util.markdown import markdown_table

LABEL = "dev.torchyard.entry"
# Whose an image or a volume is: a project and its entry (a project's `cpu` is not another's).
Owner = tuple[str, str]


@dataclass(frozen=True)
class ImageFacts:
    id: str
    entry: str
    project: str  # the scope label: "" for an image from before per-project names
    created: str
    size: int
    tags: tuple[str, ...]
    own: int = -1  # bytes of the layers no other image holds (the engine counts them by layer); -1: unknown
    keys: frozenset[str] = frozenset()  # its dependency layers' keys (torchyard.image.layers)
    dependency: str = ""  # for a dependency image: the key its tag names


@dataclass(frozen=True)
class ContainerFacts:
    id: str
    name: str
    image_id: str
    running: bool
    owner: Owner = ("", "")  # its project and entry, as its labels say
    ends_at: int = 0  # its deadline label (`run.container.DEADLINE_LABEL`); 0: none
    abandoned: bool = False  # its run is known gone (`run.staging.abandoned`): it goes whatever its deadline


@dataclass(frozen=True)
class PrunePlan:
    containers: tuple[ContainerFacts, ...]
    images: tuple[ImageFacts, ...]
    volumes: tuple[str, ...]


def plan_prune(
    images: Sequence[ImageFacts],
    containers: Sequence[ContainerFacts],
    volumes: Mapping[str, Owner],
    *,
    keep: int,
    in_use: frozenset[str] = frozenset(),
    untrusted: frozenset[str] = frozenset(),
    now: float = 0.0,
) -> PrunePlan:
    """What to remove. `containers` are torchyard's, `in_use` the images of every other container on the
    engine, `volumes` maps each torchyard volume to its project and entry, and `untrusted` names the volumes
    of untrusted runs' scopes. A container still running past its deadline (`now`: a run killed outright, whose
    own bound was stopped), or whose run is known gone, goes as a stopped one does."""
    stopped = tuple(c for c in containers if not c.running or c.abandoned or 0 < c.ends_at < now)
    in_use = in_use | {container.image_id for container in containers if container not in stopped}
    groups: dict[Owner, list[ImageFacts]] = {}
    for image in images:
        if not image.dependency:
            groups.setdefault((image.project, image.entry), []).append(image)
    doomed: list[ImageFacts] = []
    for (project, _), group in groups.items():
        tagged = sorted((image for image in group if image.tags), key=_recency, reverse=True)
        untagged = [image for image in group if not image.tags]
        # An image without a project is named as no build or run reads any more: it goes, however new.
        old = tagged[keep:] if project else tagged
        doomed += [image for image in [*old, *untagged] if image.id not in in_use]
    kept_keys = {key for group in groups.values() for image in group if image not in doomed for key in image.keys}
    doomed += [
        image for image in images if image.dependency and image.dependency not in kept_keys and image.id not in in_use
    ]
    left = {(image.project, image.entry) for image in images if image not in doomed and not image.dependency}
    old_volumes = tuple(sorted(name for name, owner in volumes.items() if owner not in left or name in untrusted))
    return PrunePlan(stopped, tuple(doomed), old_volumes)


def in_scope(
    images: Sequence[ImageFacts],
    containers: Sequence[ContainerFacts],
    volumes: Mapping[str, Owner],
    *,
    entries: Sequence[str] = (),
    project: str | None = None,
) -> tuple[list[ImageFacts], list[ContainerFacts], dict[str, Owner]]:
    """What a prune limited to `entries` (of every project) and to `project` (its scope name) may touch. A
    dependency image has no owner: a scoped prune takes one that only the scope's images hold, which then goes
    with the last of them; one nothing holds is left to an unscoped prune."""

    def mine(owner: Owner) -> bool:
        return (not entries or owner[1] in entries) and (project is None or owner[0] == project)

    if not entries and project is None:
        return list(images), list(containers), dict(volumes)
    held: dict[bool, set[str]] = {True: set(), False: set()}
    for image in images:
        if not image.dependency:
            held[mine((image.project, image.entry))].update(image.keys)
    chosen = [
        image
        for image in images
        if (
            mine((image.project, image.entry))
            if not image.dependency
            else image.dependency in held[True] and image.dependency not in held[False]
        )
    ]
    return chosen, [c for c in containers if mine(c.owner)], {name: o for name, o in volumes.items() if mine(o)}


def _recency(image: ImageFacts) -> tuple[int, str]:
    """Newest first by creation, but the images the aliases name first of all, the trusted one before the
    untrusted: what the entry's last trusted and untrusted build or run used, which may be older than another (a
    build reused an image whose content came back). A pull request's image never pushes out the trusted one."""
    aliases = {tag.rpartition(":")[2] for tag in image.tags}
    rank = 2 if ALIASES["trusted"] in aliases else 1 if ALIASES["untrusted"] in aliases else 0
    return rank, image.created


def _own_bytes(client: docker.DockerClient) -> dict[str, int]:
    """Per image ID: the bytes of its layers that no other image holds (the engine's size less what it shares)."""
    own = {}
    for item in client.df().get("Images") or []:
        size, shared = int(item.get("Size", 0)), int(item.get("SharedSize", -1))
        if shared >= 0:
            own[str(item.get("Id", ""))] = size - shared
    return own


def _facts(
    client: docker.DockerClient,
) -> tuple[list[ImageFacts], list[ContainerFacts], dict[str, Owner], frozenset[str], frozenset[str]]:
    own = _own_bytes(client)
    images = [
        ImageFacts(
            id=str(image.id),
            entry=image.labels.get(LABEL, ""),
            project=image.labels.get(SCOPE_LABEL, ""),
            created=str(image.attrs.get("Created", "")),
            size=int(image.attrs.get("Size", 0)),
            tags=tuple(image.tags),
            own=own.get(str(image.id), -1),
            keys=frozenset(image_keys(image.labels).values()),
        )
        for image in client.images.list(all=True, filters={"label": LABEL})
    ]
    images += [
        ImageFacts(
            id=str(image.id),
            entry="",
            project="",
            created=str(image.attrs.get("Created", "")),
            size=int(image.attrs.get("Size", 0)),
            tags=tuple(image.tags),
            own=own.get(str(image.id), -1),
            dependency=tag.rpartition(":")[2],
        )
        for image in client.images.list(name=DEPENDENCY_REPOSITORY)
        for tag in image.tags[:1]
        if LABEL not in (image.labels or {})
    ]
    containers = [
        ContainerFacts(
            str(c.id),
            str(c.name),
            str(c.attrs.get("Image", "")),
            c.status == "running",
            _owner(c.labels or {}),
            _deadline(c.labels or {}),
            abandoned(staging_root(), str(c.name)),
        )
        for c in client.containers.list(all=True, filters={"label": LABEL})
    ]
    listed = client.volumes.list(filters={"label": LABEL})
    volumes = {str(volume.name): _owner(volume.attrs.get("Labels") or {}) for volume in listed}
    # An untrusted run's volume left by a killed run, and a cache volume from before scopes (no scope
    # label: no run mounts it any more) are always removed.
    untrusted = frozenset(
        str(volume.name)
        for volume in listed
        if (volume.attrs.get("Labels") or {}).get(TRUST_LABEL, "untrusted") == "untrusted"
    )
    others = frozenset(
        str(container.attrs.get("Image", ""))
        for container in client.containers.list(all=True)
        if LABEL not in (container.labels or {})
    )
    return images, containers, volumes, others, untrusted


def _deadline(labels: Mapping[str, str]) -> int:
    value = labels.get(DEADLINE_LABEL, "")
    return int(value) if value.isdigit() else 0


def _owner(labels: Mapping[str, str]) -> Owner:
    return labels.get(SCOPE_LABEL, ""), labels.get(LABEL, "")


def _disk(client: docker.DockerClient) -> int:
    usage = client.df()
    cache = sum(int(item.get("Size", 0)) for item in usage.get("BuildCache") or [])
    volumes = sum(int((item.get("UsageData") or {}).get("Size", 0) or 0) for item in usage.get("Volumes") or [])
    return int(usage.get("LayersSize", 0)) + cache + max(volumes, 0)


def prune(
    *,
    keep: int = 2,
    keep_storage: str = "10g",
    dry_run: bool = False,
    entries: Sequence[str] = (),
    project: str | None = None,
    env: Mapping[str, str] = os.environ,
) -> int:
    """Remove what `plan_prune` decides (only for `entries` when given, only `project`'s when given; the build
    cache is shared, so it is pruned only when neither is); prints each removal and the disk given back."""
    client = engine(env)
    before = _disk(client)
    images, containers, volumes, others, untrusted = _facts(client)

    scoped = bool(entries) or project is not None
    images, containers, volumes = in_scope(images, containers, volumes, entries=entries, project=project)
    plan = plan_prune(images, containers, volumes, keep=keep, in_use=others, untrusted=untrusted, now=time.time())
    if project is not None:
        shared = "the build cache is shared: --all-projects prunes it"
        print(f"project {project} only (its images, cache volumes and containers; {shared})")
    rows = [("container", container.name, "-") for container in plan.containers]
    rows += [("image", ", ".join(image.tags) or image.id[:19], _size(image)) for image in plan.images]
    rows += [("volume", name, "-") for name in plan.volumes]
    if not scoped:
        rows.append(("build cache", f"beyond {keep_storage}", "-"))
    sys.stdout.write(markdown_table(("what", "name", "size (its own layers: what removing it frees)"), rows))
    if dry_run:
        print("dry run: nothing removed")
        return 0
    for container in plan.containers:
        client.containers.get(container.id).remove(force=container.running)  # only one past its deadline runs
    alive = {str(container.name) for container in client.containers.list(all=True)}
    for name in sweep_stages(staging_root(), alive):
        print(f"removed the staging folder of {name} (a run killed outright)")
    for image in plan.images:
        try:
            client.images.remove(image.id, force=True, noprune=False)
        except docker.errors.APIError as error:  # shared with an image kept, or used meanwhile: keep it
            print(f"kept {image.id[:19]}: {error.explanation}", file=sys.stderr)
    for name in plan.volumes:
        client.volumes.get(name).remove()
    if not scoped:
        client.api.prune_builds(keep_storage=_bytes(keep_storage))
    after = _disk(client)
    print(f"gave back {(before - after) / 1e9:.2f} GB ({before / 1e9:.2f} GB -> {after / 1e9:.2f} GB)")
    return 0


def _size(image: ImageFacts) -> str:
    """An image's size and, counted by layer, the part only it holds: an image that shares its torch layer
    with a kept one gives back only its other layers."""
    if image.own < 0:
        return f"{image.size / 1e9:.2f} GB"
    return f"{image.size / 1e9:.2f} GB ({image.own / 1e6:.0f} MB its own)"


def _bytes(size: str) -> int:
    units = {"b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    unit = size[-1].lower() if size[-1].isalpha() else "b"
    return int(size.rstrip("bkmgBKMG")) * units[unit]
