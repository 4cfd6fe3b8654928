"""One small pin moves: the layered image against the single dependency layer it replaced, on the real cpu entry.

For each Dockerfile (the single-layer one of commit BASELINE, then this checkout's layered one), on the real
engine and a loopback registry (Debian's docker-registry):

1. cold: no image of the entry, no build cache; build the entry's committed lock, then push it;
2. one small pin moves (the lock resolved again with `tabulate==0.9.0` added; tabulate is in the lock at
   0.10.0, a dependency of ExecuTorch's): rebuild, counting the seconds and the disk the rebuild adds (the
   engine's layer store before and after), then push, counting the bytes the registry had to take;
3. a second runner that holds the first image and no build cache pulls the new one by its tag;
4. a third image of the entry (`tabulate==0.8.10`): the disk it adds.

Prints a Markdown table, today against layered, with ratios. Run from the repository root with
`TORCHYARD_BASE_IMAGES=cpu=torchyard/base:bookworm` and, where a local wheel folder exists,
`TORCHYARD_FIND_LINKS=/opt/pypi-more/files`: `python benchmarks/layers.py`. It removes the entry's local
images and prunes the build cache: it is a benchmark, not something to run next to other builds.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

import docker

from torchyard.image import plan as image_plan
from torchyard.image.outcome import Built
from torchyard.image.plan import BuildOptions, image_repository
from torchyard.image.registry import pull
from torchyard.lock.resolve import lock_entry
from torchyard.matrix import load_plan
from torchyard.matrix.machine import Registry, load_machine
from torchyard.matrix.schema import Entry
from torchyard.pipeline import build_images

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.integration.conftest import PROJECT, copy_tree, loopback_registry, remove_images

BASELINE = "e9abb89"  # the last commit with one dependency layer
ENTRY = "cpu"


def layer_store(client: docker.DockerClient) -> int:
    return int(client.df().get("LayersSize", 0))


def fresh_runner(client: docker.DockerClient) -> None:
    remove_images(client, f"{image_repository(PROJECT, ENTRY)}:")
    client.api.prune_builds(all=True)


def timed_build(entry: Entry, lockdir: Path, env: Mapping[str, str], *, push: bool) -> tuple[Built, float]:
    started = time.monotonic()
    (built,) = build_images(
        [entry], lockdir, BuildOptions(push=push), project=PROJECT, machine=load_machine(env), env=env
    )
    return built, time.monotonic() - started


def bumped(entry: Entry, pin: str, lockdir: Path) -> Entry:
    moved = dataclasses.replace(entry, requirements=(*entry.requirements, pin))
    lock_entry(moved, lockdir, {})
    return moved


def measure(variant: str, client: docker.DockerClient, registry: Registry, env: Mapping[str, str]) -> dict[str, float]:
    entry = load_plan(Path("matrix.toml")).entry(ENTRY)
    figures: dict[str, float] = {}
    fresh_runner(client)
    cold, figures["cold build s"] = timed_build(entry, Path("lockfiles"), env, push=False)
    figures["image GB"] = cold.size_bytes / 1e9
    pushed, figures["first push s"] = timed_build(entry, Path("lockfiles"), env, push=True)
    figures["first push GB"] = sum(transfer.bytes for transfer in pushed.pushed) / 1e9

    first_bump = bumped(entry, "tabulate==0.9.0", Path(f"bump1-{variant}"))
    before = layer_store(client)
    rebuilt, figures["rebuild s"] = timed_build(first_bump, Path(f"bump1-{variant}"), env, push=False)
    figures["rebuild adds GB"] = (layer_store(client) - before) / 1e9
    repushed, figures["push s"] = timed_build(first_bump, Path(f"bump1-{variant}"), env, push=True)
    figures["push GB"] = sum(transfer.bytes for transfer in repushed.pushed) / 1e9

    # A second runner: it holds the first image only (no build cache), and pulls the new one by its tag.
    remove_images(client, rebuilt.tag.partition(":")[2], f"{image_repository(PROJECT, ENTRY)}:latest")
    client.api.prune_builds(all=True)
    started = time.monotonic()
    transfer = pull(client, registry, registry.ref(rebuilt.tag), env)
    figures["pull s"] = time.monotonic() - started
    if transfer is None:
        raise SystemExit(f"{variant}: the registry does not have {rebuilt.tag}")
    figures["pull GB"] = transfer.bytes / 1e9

    second_bump = bumped(entry, "tabulate==0.8.10", Path(f"bump2-{variant}"))
    before = layer_store(client)
    timed_build(second_bump, Path(f"bump2-{variant}"), env, push=False)
    figures["third image adds GB"] = (layer_store(client) - before) / 1e9
    print(f"{variant}: {figures}", file=sys.stderr, flush=True)
    return figures


def baseline_file(name: str) -> bytes:
    return subprocess.run(["git", "show", f"{BASELINE}:docker/{name}"], check=True, capture_output=True).stdout


def main() -> None:
    client = docker.from_env()
    old = {name: baseline_file(name) for name in ("Dockerfile", ".dockerignore")}
    results: dict[str, dict[str, float]] = {}
    with loopback_registry() as running, tempfile.TemporaryDirectory() as folder:
        registry = Registry(f"{running.host}/team", running.auth)
        env = {
            **os.environ,
            "TORCHYARD_MACHINE_FILE": str(Path(folder) / "machine.toml"),
            "TORCHYARD_REGISTRY": registry.name,
            "TORCHYARD_REGISTRY_USERNAME": running.username,
            "TORCHYARD_REGISTRY_PASSWORD": running.password,
        }
        os.chdir(copy_tree(Path(folder)))
        plan_module = cast(Any, image_plan)  # the plan reads the baseline's Dockerfile, then this checkout's
        layered_image_file = image_plan.image_file
        plan_module.image_file = lambda name: old.get(name) or layered_image_file(name)
        plan_module.dockerfile = lambda: old["Dockerfile"]
        results["today"] = measure("today", client, registry, env)
        plan_module.image_file = layered_image_file
        plan_module.dockerfile = lambda: layered_image_file("Dockerfile")
        results["layered"] = measure("layered", client, registry, env)
        fresh_runner(client)
    today, layered = results["today"], results["layered"]
    print("\n| measure (cpu entry) | today: one dependency layer | layered | today / layered |\n|---|---|---|---|")
    for key in today:
        ratio = today[key] / layered[key] if layered[key] else float("inf")
        print(f"| {key} | {today[key]:.2f} | {layered[key]:.2f} | {ratio:.2f}x |")


if __name__ == "__main__":
    main()
