"""Two runners, one registry, on the real engine; prints a Markdown table of seconds, bytes and ratios.

A loopback registry (Debian's docker-registry, basic auth) stands for the registry beside the runners:
- runner A: no image of the entry, no build cache; the base comes from the registry by digest; a cold
  build, then `--push`;
- runner B (fresh): every image of the entry, the base's registry name and the whole build cache are
  removed; B builds a source-only change (a new content tag) from the registry's inline layer cache;
- runner C (fresh too): the unchanged image is pulled by its content-addressed tag.

Every runner starts without wheels: no uv cache (the build cache is pruned) and no local wheel folders
(TORCHYARD_FIND_LINKS is ignored), so the cold build downloads from PyPI as a new runner does. Run from the
repository root: `python benchmarks/registry.py [ENTRY]` (default cpu). It removes the entry's local images
and prunes the build cache: it is a benchmark, not something to run next to other builds.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, cast

import docker

from torchyard.image import plan as image_plan
from torchyard.image.context import inimage_files
from torchyard.image.debootstrap import DEFAULT_TAG
from torchyard.image.plan import BuildOptions, image_repository
from torchyard.matrix import load_plan
from torchyard.matrix.machine import load_machine
from torchyard.pipeline import build_images

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.integration.conftest import PROJECT, copy_tree, loopback_registry, remove_images


def fresh_runner(client: docker.DockerClient, entry: str) -> None:
    """What a runner that never built `entry` has: none of its images, no build cache."""
    remove_images(client, f"{image_repository(PROJECT, entry)}:", "torchyard-bench/base")
    client.api.prune_builds(all=True)


def main(entry_name: str) -> None:
    client = docker.from_env()
    rows: list[tuple[str, str]] = []
    with loopback_registry() as registry, tempfile.TemporaryDirectory() as folder:
        tree = copy_tree(Path(folder))
        os.chdir(tree)
        repository = f"{registry.host}/torchyard-bench/base"
        client.images.get(DEFAULT_TAG).tag(repository, "bookworm")
        events = list(client.api.push(repository, "bookworm", stream=True, decode=True, auth_config=registry.auth))
        digest = next(event["aux"]["Digest"] for event in events if "aux" in event)
        env = {
            **{key: value for key, value in os.environ.items() if key != "TORCHYARD_FIND_LINKS"},
            "TORCHYARD_BASE_IMAGES": f"{entry_name}={repository}@{digest}",
            "TORCHYARD_REGISTRY": f"{registry.host}/team",
            "TORCHYARD_REGISTRY_USERNAME": registry.username,
            "TORCHYARD_REGISTRY_PASSWORD": registry.password,
        }
        entry = load_plan(Path("matrix.toml")).entry(entry_name)
        lockdir = Path("lockfiles")

        fresh_runner(client, entry_name)
        started = time.monotonic()
        (cold,) = build_images([entry], lockdir, BuildOptions(), project=PROJECT, machine=load_machine(env), env=env)
        cold_seconds = time.monotonic() - started
        started = time.monotonic()
        (pushed,) = build_images(
            [entry], lockdir, BuildOptions(push=True), project=PROJECT, machine=load_machine(env), env=env
        )
        push_seconds = time.monotonic() - started
        pushed_bytes = sum(transfer.bytes for transfer in pushed.pushed)

        fresh_runner(client, entry_name)
        changed = Path(folder) / "changed.py"
        changed.write_text("# a source-only change\n")
        shipped = inimage_files()
        plan_module = cast(Any, image_plan)  # the files the next plan reads, with one changed
        plan_module.inimage_files = lambda: (*shipped, ("torchyard/bench_change.py", changed))
        started = time.monotonic()
        (cached,) = build_images([entry], lockdir, BuildOptions(), project=PROJECT, machine=load_machine(env), env=env)
        cached_seconds = time.monotonic() - started
        plan_module.inimage_files = inimage_files

        fresh_runner(client, entry_name)  # a third runner: none of the layers either
        started = time.monotonic()
        (pulled,) = build_images([entry], lockdir, BuildOptions(), project=PROJECT, machine=load_machine(env), env=env)
        pull_seconds = time.monotonic() - started
        if pulled.pulled is None or pulled.tag != cold.tag:
            raise SystemExit("runner B did not pull the image runner A pushed (did the source change meanwhile?)")

        pulled_gb = pulled.pulled.bytes / 1e9
        rows += [
            ("image size", f"{cold.size_bytes / 1e9:.2f} GB"),
            (f"runner A: cold build ({cold.origin})", f"{cold_seconds:.1f} s"),
            ("runner A: push (tag and alias)", f"{push_seconds:.1f} s, {pushed_bytes / 1e9:.2f} GB of layers"),
            (f"runner B: source-only change from the registry cache ({cached.origin})", f"{cached_seconds:.1f} s"),
            ("runner C: pull of the existing tag", f"{pull_seconds:.1f} s, {pulled_gb:.2f} GB compressed"),
            ("ratio cold build / runner B cache build", f"{cold_seconds / cached_seconds:.1f}x"),
            ("ratio cold build / runner C pull", f"{cold_seconds / pull_seconds:.1f}x"),
        ]
    print(f"\n| measure ({entry_name}) | value |\n|---|---|")
    for measure, value in rows:
        print(f"| {measure} | {value} |")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "cpu")
