"""What a run may write on the host while it runs, and how each is counted: the staging folder its reports go
to, and an untrusted run's own cache volume. `container._Watch` checks each bound as the run writes and kills
the container past one, so a run cannot fill the host's disk before the hand-back counts what it left."""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import docker
import docker.errors

from torchyard.errors import UsageError
from torchyard.matrix.machine import size_bytes
from torchyard.util.folders import folder_bytes

if TYPE_CHECKING:
    from torchyard.run.container import RunPlan


@dataclass(frozen=True)
class Bound:
    """A folder the run writes on the host and the most it may hold; checked every `every` ticks, by reading the
    folder, or through `measure` (the engine's count of a volume this host cannot read)."""

    what: str
    folder: Path
    limit: int
    every: int = 1
    measure: Callable[[], int] | None = None

    def size(self) -> int:
        return self.measure() if self.measure is not None else folder_bytes(self.folder)


def run_bounds(client: docker.DockerClient, plan: RunPlan, stage: Path) -> tuple[Bound, ...]:
    """The staging folder the reports are written to, and an untrusted run's own cache volume (where the pull
    request's code could otherwise fill the disk): read where this host can read the engine's volumes (a root
    runner), else as the engine counts it (a runner in the `docker` group); where neither can, the run is refused
    before it starts, in one line, rather than run unbounded."""
    bounds = [Bound("reports", stage, size_bytes(plan.seal.limits.reports))]
    if plan.scope.ephemeral:
        limit = size_bytes(plan.seal.limits.cache)
        mountpoint = Path(str(client.volumes.get(plan.scope.volume).attrs.get("Mountpoint", "")))
        if mountpoint.is_absolute() and os.access(mountpoint, os.R_OK | os.X_OK):
            bounds.append(Bound("cache", mountpoint, limit, every=10))
        elif engine_volume_bytes(client, plan.scope.volume) is not None:
            counted = functools.partial(_counted_volume_bytes, client, plan.scope.volume)
            bounds.append(Bound("cache", mountpoint, limit, every=30, measure=counted))
        else:
            raise UsageError(
                f"entry {plan.entry!r}: an untrusted run's cache volume {plan.scope.volume} cannot be bounded here: "
                "this user cannot read the engine's volumes and the engine does not count their size; run "
                "untrusted runs as a user who can (root), or on an engine whose volume driver is `local`"
            )
    return tuple(bounds)


def engine_volume_bytes(client: docker.DockerClient, volume: str) -> int | None:
    """What the engine counts volume `volume` holding (`docker system df -v`); None where it does not say
    (a volume driver other than `local` reports -1)."""
    try:
        volumes = client.df().get("Volumes") or []
    except Exception:  # an API error, a read timeout (a volume of millions of files counts slowly): no count
        return None
    size = next((v.get("UsageData", {}).get("Size") for v in volumes if v.get("Name") == volume), None)
    return size if isinstance(size, int) and size >= 0 else None


def _counted_volume_bytes(client: docker.DockerClient, volume: str) -> int:
    """The engine's count while the run writes; a count it cannot give stops the run as over its bound."""
    size = engine_volume_bytes(client, volume)
    return size if size is not None else sys.maxsize
