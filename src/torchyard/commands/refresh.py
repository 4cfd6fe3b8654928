"""`torchyard refresh`: move the pins in matrix.toml, for review in a pull request.

- `exclude-newer` (the lock cut-off) becomes today, midnight UTC;
- each accelerator's base image keeps its name and tag and gets the digest its registry serves for that
  tag now, read through the engine from the registry API (a multi-platform index keeps the index's own
  digest). Credentials are Docker's own (`docker login`), or the machine registry's from the environment.
The file is edited as text, value by value, so comments and layout stay as people wrote them.
"""

from __future__ import annotations

import datetime as dt
import os
import re
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

from torchyard.errors import ConfigError, TorchyardError
from torchyard.host.engine import engine
from torchyard.image.registry import DIGEST, registry_host, remote_digest
from torchyard.matrix import load_plan, parse_plan
from torchyard.matrix.machine import Machine
from torchyard.util.atomic import write_atomically

EXCLUDE_NEWER = re.compile(r"(?m)^exclude-newer\s*=\s*\S+$")


def bump_exclude_newer(text: str, today: dt.date) -> str:
    """Set the top-level cut-off to `today` at 00:00 UTC (entries' own cut-offs are left alone)."""
    if EXCLUDE_NEWER.search(text) is None:
        raise ConfigError("matrix.toml: no top-level exclude-newer to move")
    return EXCLUDE_NEWER.sub(f"exclude-newer = {today.isoformat()}T00:00:00Z", text, count=1)


def replace_digest(text: str, name: str, old: str, new: str) -> str:
    """Swap one pinned digest for another, for exactly that image name."""
    before = f'"{name}@{old}"'
    if before not in text:
        raise ConfigError(f"matrix.toml: {name}@{old} not found")
    return text.replace(before, f'"{name}@{new}"')


def refresh(
    matrix: Path,
    machine: Machine,
    *,
    today: dt.date | None = None,
    resolve: Callable[[str], str] | None = None,
    env: Mapping[str, str] = os.environ,
) -> list[tuple[str, str, str]]:
    """Rewrite `matrix` in place (atomically), read with this `machine`'s allow-list; digests come through
    its registry's credentials where a base is in it. Returns (image, old digest, new digest) per change."""
    if resolve is None:
        client = engine(env)
        registry = machine.registry

        def resolve(name: str) -> str:
            own = registry if registry is not None and registry_host(name) == registry.host else None
            return remote_digest(client, name, own.auth if own is not None else None)

    allowed = machine.allowed_docker_run
    plan = load_plan(matrix, allowed_docker_run=allowed)
    text = bump_exclude_newer(matrix.read_text(encoding="utf-8"), today or dt.datetime.now(dt.UTC).date())
    changes = []
    accelerators = (*plan.accelerators, *(entry.accelerator for entry in plan.entries))  # entries' own bases too
    bases = (accelerator.base_image for accelerator in accelerators if accelerator.base_image is not None)
    for image in dict.fromkeys(bases):
        current = resolve(image.name)
        if not DIGEST.fullmatch(current):
            raise TorchyardError(f"{image.name}: the registry answered {current!r}, not a sha256 digest")
        if current != image.digest:
            text = replace_digest(text, image.name, image.digest, current)
            changes.append((image.name, image.digest, current))
    parse_plan(text, matrix, allowed_docker_run=allowed)  # the rewritten text must still be a valid matrix
    write_atomically(matrix, text)
    for name, old, new in changes:
        print(f"{name}: {old} -> {new}", file=sys.stderr)
    return changes
