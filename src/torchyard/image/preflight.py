"""Before a build's first layer: the base has the entry's Python, and the engine's disk can hold the build."""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping

import docker

from torchyard.errors import ImageBuildError
from torchyard.image.held import Held
from torchyard.image.layers import added_bytes
from torchyard.image.plan import BuildPlan
from torchyard.seal import Helper, run_sealed, run_user
from torchyard.util import proc

BASE_DIGEST_LABEL = "org.opencontainers.image.base.digest"


def base_probe(plan: BuildPlan, *, name: str, user: str) -> Helper:
    """The container that looks for the entry's Python (or apt) in the base: sealed like every helper, the
    base's own `sh` by its path. Its status says what it found: 0 found, 1 not."""
    python = f"python{plan.python}"
    probe = f"command -v {python}" if plan.vendor else f"command -v {python} || command -v apt-get"
    command = ("/bin/sh", "-c", f"({probe}) >/dev/null || exit 1")
    return Helper(f"{name}-base", user, plan.base_image, command, warden=False)


def check_base(
    client: docker.DockerClient,
    plan: BuildPlan,
    held: Held,
    *,
    docker_path: str = "docker",
    runner: proc.Runner = proc.run,
    env: Mapping[str, str] = os.environ,
) -> None:
    """The base has the entry's Python, or apt to install it (vendor bases: Python). A sealed container is
    started to look, except where this entry's `last` image was built from this very base (its label says so):
    that build found it, and a source-only rebuild need not look again."""
    if not held.base:
        return  # pulled by the build; it checks Python itself in the first step
    base_digest = dict(plan.build_args).get("BASE_DIGEST", "")
    last = held.last
    if last is not None and base_digest and (last.labels or {}).get(BASE_DIGEST_LABEL) == base_digest:
        return
    name = f"torchyard-{plan.entry}-{os.urandom(4).hex()}"
    helper = base_probe(plan, name=name, user=run_user(os.getuid(), os.getgid()))
    status = run_sealed(helper, docker_path=docker_path, runner=runner, env=env, check=False).returncode
    if status == 1:
        python = f"python{plan.python}"
        needs = python if plan.vendor else f"{python} and no apt-get to install it"
        raise ImageBuildError(f"entry {plan.entry!r}: base image {plan.base_image} has no {needs}")
    if status != 0:
        raise ImageBuildError(
            f"entry {plan.entry!r}: the check of base image {plan.base_image} failed with exit status {status} "
            "(a base needs /bin/sh and /usr/bin/timeout)"
        )


def needs_more_than_free(need: int, free: int) -> bool:
    """A build that needs about `need` bytes leaves a margin."""
    return need > 0 and free < need + (2 << 30)


def check_free_disk(plan: BuildPlan, held: Held) -> None:
    """Stop with the fix when the engine's disk cannot hold what this build adds (`layers.added_bytes`)."""
    if held.last is None or held.root is None:
        return  # nothing to estimate from, or a remote engine whose disk this host cannot see
    need = added_bytes(plan.layers, held.last, held.labelled)
    free = shutil.disk_usage(held.root).free
    if needs_more_than_free(need, free):
        raise ImageBuildError(
            f"entry {plan.entry!r}: the build needs about {need / 1e9:.1f} GB and {held.root} has "
            f"{free / 1e9:.1f} GB free: run `torchyard prune` (`nox -s prune`), then build again"
        )
