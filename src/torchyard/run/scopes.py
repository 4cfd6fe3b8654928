"""The entry's cache, scoped by project and trust as GitHub scopes its cache.

Everything a run leaves for a later one (inductor's caches and C++ headers, lowered programs, stored
patterns, replay records) lives under the entry's cache root, so scoping the root scopes them all:
- a trusted run reads and writes `torchyard-cache-<project>-<entry>`, which nothing else writes;
- an untrusted run gets a volume of its own, seeded with a copy of the trusted one (it starts warm) and
  removed when it ends: what it writes reaches no later run, and it never writes the trusted scope.
`--local` and `--in-place` keep the same two scopes in `.torchyard/cache/` (they are per checkout already).

Docker fills an empty volume from the image at its mount point (read-only or not) unless the mount says
`volume-nocopy`: the seed mounts both volumes so, and runs in the entry's base image as the trusted matrix.toml
pins it (`seed_image`), never the run's own: nothing of a pull request's image reaches a cache it does not own.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import docker
import docker.types

from torchyard import contract
from torchyard.image.plan import resolve_base
from torchyard.matrix.schema import Entry
from torchyard.seal import Helper, sealed_run
from torchyard.trust import Trust

CACHES = Path(".torchyard") / "cache"
UNTRUSTED_CACHES = Path(".torchyard") / "cache-untrusted"
ENTRY_LABEL = "dev.torchyard.entry"
SCOPE_LABEL = "dev.torchyard.scope"
TRUST_LABEL = "dev.torchyard.trust"
STACK_LABEL = "dev.torchyard.stack"
DEADLINE_LABEL = "dev.torchyard.ends-at"  # a container still there past it is removed by the next run or prune
SEED_TARGET = "/seed"


@dataclass(frozen=True)
class CacheScope:
    volume: str  # what the run mounts, writable
    seed: str | None  # the trusted volume an untrusted run starts from, copied (read-only) into its own
    project: str
    trust: Trust
    stack: str = ""  # the image's stack (`layers.stack_of`): a new scope may start from a sibling entry's cache

    @property
    def ephemeral(self) -> bool:
        """Removed when the run ends: an untrusted run's writes reach no later run."""
        return self.trust == "untrusted"

    def labels(self, entry: Entry) -> dict[str, str]:
        stack = {STACK_LABEL: self.stack} if self.stack else {}
        return {ENTRY_LABEL: entry.name, SCOPE_LABEL: self.project, TRUST_LABEL: self.trust, **stack}


def cache_scope(
    entry: Entry, project: str, trust: Trust, run_id: str, stack: str = "", *, matrix_tag: str = ""
) -> CacheScope:
    """The entry's scope; `matrix_tag` (`trust.matrix_tag`) keeps a second matrix file's entry of the same name
    apart, while its project (the siblings a new cache starts from) stays the repository's."""
    trusted = f"torchyard-cache-{project}-{entry.name}{matrix_tag}"
    if trust == "trusted":
        return CacheScope(trusted, None, project, trust, stack)
    return CacheScope(f"{trusted}{untrusted_ending(run_id)}", trusted, project, trust, stack)


def run_id(name: str) -> str:
    """The run a container (or its staging folder) of that `name` belongs to: its name's last part."""
    return name.rsplit("-", 1)[-1]


def untrusted_ending(run: str) -> str:
    """How the name of run `run`'s own cache volume ends (an untrusted run's: made for it alone)."""
    return f"-untrusted-{run}"


def sibling_filters(scope: CacheScope, *, same_stack: bool = True) -> dict[str, list[str]]:
    """The engine's filter for the trusted caches of `scope`'s project (on the same stack, by default): every key
    in them names what it was made with (versions, settings, device), so another entry's warm cache is a sound
    start."""
    labels = [f"{SCOPE_LABEL}={scope.project}", f"{TRUST_LABEL}=trusted"]
    return {"label": [*labels, f"{STACK_LABEL}={scope.stack}"] if same_stack else labels}


def seed_image(entry: Entry, base_overrides: Mapping[str, str]) -> str:
    """The image the seed's copy runs in: the entry's base as this machine resolves it (machine.toml's override,
    else matrix.toml's pin, which for an untrusted run is the trusted matrix.toml's: the gate checked it). Its
    `cp` and `timeout` are the base's, never what a pull request's lock installed over them in the run's image
    (a build step runs the lock's code as root)."""
    return resolve_base(entry, base_overrides)


def prime_volume(client: docker.DockerClient, scope: CacheScope, image: str) -> None:
    """The run's own volume as its container's first mount leaves it, before the seed writes it: Docker copies
    the run image's cache folder (empty, world-writable and sticky) into an empty volume, so the seed's
    unprivileged copy can write it. The container is created, never started: nothing of `image` runs, and what
    the copy brings lands in the volume that image's run mounts anyway (an untrusted run's own)."""
    mount = docker.types.Mount(contract.IMAGE_CACHE, scope.volume, type="volume")
    created = client.containers.create(image, entrypoint=["/bin/true"], mounts=[mount], network_disabled=True)
    created.remove(force=True)


def seed_helper(scope: CacheScope, source: str, *, image: str, user: str, name: str, folder: str = ".") -> Helper:
    """The helper container that copies the trusted volume `source` (or its `folder` alone) into the run's own
    (primed: `prime_volume`), in `image` (`seed_image`: the base's `cp`, no code of the project's, no warden).
    Both volumes are `volume-nocopy`: an empty one is never filled from the image."""
    mounts = (
        "--mount", f"type=volume,source={source},target={SEED_TARGET},readonly,volume-nocopy",
        "--mount", f"type=volume,source={scope.volume},target={contract.IMAGE_CACHE},volume-nocopy",
    )  # fmt: skip
    copy = ("/bin/cp", "-R", f"{SEED_TARGET}/{folder}", f"{contract.IMAGE_CACHE}/")
    return Helper(f"{name}-seed", user, image, copy, options=mounts, warden=False)


def seed_args(
    scope: CacheScope, source: str, *, image: str, user: str, name: str, folder: str = "."
) -> tuple[str, ...]:
    """`docker run` of the seed (`seed_helper`), sealed as every helper container is."""
    return sealed_run(seed_helper(scope, source, image=image, user=user, name=name, folder=folder))


def local_cache(entry: Entry, trust: Trust) -> str:
    """The entry's cache on this machine (`--local` and `--in-place`): outside the reports folder, which every
    run empties, so inductor's caches, the artifacts and the replayed results stay warm. Both modes share it:
    every key in it names the versions it was made with. An untrusted run (`--unsandboxed` only) gets a fresh
    copy of the trusted one in `.torchyard/cache-untrusted/`; nothing it writes is read by a trusted run."""
    trusted = (CACHES / entry.name).absolute()
    if trust == "trusted":
        return str(trusted)
    own = (UNTRUSTED_CACHES / entry.name).absolute()
    if own.is_symlink() or own.is_file():
        own.unlink()
    elif own.exists():
        shutil.rmtree(own)
    if trusted.is_dir():
        shutil.copytree(trusted, own, symlinks=True)
    else:
        own.mkdir(parents=True)
    return str(own)
