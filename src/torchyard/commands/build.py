"""`torchyard build` and `torchyard base`: build the selected entries' images (the core's steps up to the
images, `torchyard.pipeline`); make the local base."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from torchyard.host.engine import build_client, engine
from torchyard.image.debootstrap import DEFAULT_TAG, bootstrap_base
from torchyard.image.plan import BuildOptions
from torchyard.matrix.machine import Machine
from torchyard.matrix.schema import Entry
from torchyard.pipeline import build_images
from torchyard.util import proc


def build(
    entries: Sequence[Entry],
    lockdir: Path,
    options: BuildOptions,
    *,
    machine: Machine,
    project: str,
    env: Mapping[str, str] = os.environ,
) -> int:
    """Build (or reuse) each entry's image, with this `machine`'s registry, base overrides and mirrors, named
    for `project` (`torchyard.trust.project_scope`); GitHub's step summary gets a table of the images. Every
    lock is checked first (offline): a missing or stale lock stops before Docker is touched. Native entries
    (MPS) have no image: they are named and left out."""
    build_images(entries, lockdir, options, machine=machine, project=project, env=env)
    return 0


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
