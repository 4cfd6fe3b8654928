"""Build the real CPU image on the real engine: reuse, and a source-only change touching only the top."""

from __future__ import annotations

import os
import subprocess
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import docker
import pytest

from tests.integration.conftest import PROJECT
from torchyard.image.buildkit import layer_steps
from torchyard.image.context import inimage_files
from torchyard.image.plan import BuildOptions
from torchyard.matrix import load_plan
from torchyard.matrix.machine import load_machine
from torchyard.pipeline import build_images
from torchyard.util import proc

pytestmark = pytest.mark.integration


class Recorder:
    """The real runner, with the build's output kept for the test to read (and still shown)."""

    def __init__(self) -> None:
        self.output: list[str] = []

    def __call__(self, args: Sequence[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        if "--iidfile" in args:  # the build itself, not the client probes
            kwargs["capture"] = True
            kwargs["tee"] = False  # the whole log, not the tail the builder keeps for its error line
            try:
                completed = proc.run(args, **kwargs)
            except Exception as error:
                print(getattr(error, "output", ""))
                raise
            self.output.append((completed.stdout or "") + (completed.stderr or ""))
            return completed
        return proc.run(args, **kwargs)


def test_cpu_image_builds_then_is_reused(
    in_tree: Path, machine_env: dict[str, str], client: docker.DockerClient
) -> None:
    entry = load_plan(Path("matrix.toml")).entry("cpu")
    (first,) = build_images(
        [entry], Path("lockfiles"), BuildOptions(), project=PROJECT, machine=load_machine(machine_env), env=machine_env
    )
    image = client.images.get(first.tag)
    labels = image.labels
    assert labels["dev.torchyard.entry"] == "cpu"
    assert labels["dev.torchyard.lock-digest"].startswith("sha256:")
    assert labels["org.opencontainers.image.base.name"] == "torchyard/base:bookworm"
    assert image.attrs["Config"]["User"] == "1000"  # the image's unprivileged user, by id
    history = " ".join(str(layer.get("CreatedBy", "")) for layer in image.history())
    assert "BEGIN CERTIFICATE" not in history and "index-args" not in history.replace("uv-index-args", "")
    script = "; ".join(  # is torch's bytecode in the image, and valid for the source as it lies there?
        [
            "import importlib.util, os, torch",
            "data = open(importlib.util.cache_from_source(torch.__file__), 'rb').read(16)",
            "stat = os.stat(torch.__file__)",
            "stamp = (int(stat.st_mtime) & 0xFFFFFFFF, stat.st_size & 0xFFFFFFFF)",
            "flags, *header = (int.from_bytes(data[i : i + 4], 'little') for i in (4, 8, 12))",
            "print(bool(flags & 1) or tuple(header) == stamp)",
        ]
    )
    checked = client.containers.run(
        first.tag, ["-c", script], entrypoint=["/opt/torchyard/venv/bin/python"], remove=True
    )
    assert checked.strip() == b"True", "the dependency layer has no valid bytecode: every run would compile torch"
    # In a job, the test step's image was built by the build step before it: found again, it is not
    # summarized twice; the build step itself says where it came from.
    summary = in_tree / "step-summary.md"
    summary_env = {**machine_env, "GITHUB_STEP_SUMMARY": str(summary)}
    (second,) = build_images(
        [entry],
        Path("lockfiles"),
        BuildOptions(),
        project=PROJECT,
        machine=load_machine(summary_env),
        env=summary_env,
        summarize_found=False,
    )
    assert (second.tag, second.reused) == (first.tag, True)
    assert not summary.exists() or "torchyard images" not in summary.read_text()
    build_images(
        [entry], Path("lockfiles"), BuildOptions(), project=PROJECT, machine=load_machine(summary_env), env=summary_env
    )
    assert summary.read_text().count("found on this runner") == 1


def test_source_only_change_rebuilds_only_the_top_layers(
    in_tree: Path, machine_env: dict[str, str], client: docker.DockerClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A change to torchyard's in-image files (as a new torchyard release brings) reuses the dependency layer."""
    entry = load_plan(Path("matrix.toml")).entry("cpu")
    source = in_tree / "changed.py"
    shipped = inimage_files()
    monkeypatch.setattr(
        "torchyard.image.plan.inimage_files", lambda: (*shipped, ("torchyard/inimage/changed.py", source))
    )
    # A first change builds an image in this test, whatever images and build cache the machine had.
    source.write_text("# a first source-only change\n")
    (before,) = build_images(
        [entry], Path("lockfiles"), BuildOptions(), project=PROJECT, machine=load_machine(machine_env), env=machine_env
    )
    source.write_text("# a second source-only change\n")
    recorder = Recorder()
    started = time.time_ns()  # a local engine: its events since now, by this clock
    (after,) = build_images(
        [entry],
        Path("lockfiles"),
        BuildOptions(),
        runner=recorder,
        project=PROJECT,
        machine=load_machine(machine_env),
        env=machine_env,
    )
    base = client.images.get(before.tag).labels["org.opencontainers.image.base.name"]
    # A container this test makes from the base after the rebuild: the events below must show it, so a
    # filter or a clock that saw nothing could not pass.
    canary = client.containers.create(base, ["true"], name=f"torchyard-canary-{uuid.uuid4().hex[:12]}")
    canary.remove()
    try:
        assert after.tag != before.tag and not after.reused
        filters = {"type": "container", "event": "create"}
        events = client.events(since=started // 10**9, until=time.time_ns() // 10**9 + 1, decode=True, filters=filters)
        created = [event for event in events if event.get("from") == base and event["timeNano"] >= started]
        # The entry's last image came from this very base: the rebuild starts no container to look at it.
        assert [event["id"] for event in created] == [canary.id], created
        (log,) = recorder.output
        Path(os.environ.get("TORCHYARD_BUILD_LOG", "/dev/null")).write_text(log)
        cached = layer_steps(log)
        assert set(cached) == {"torch", "pytorch", "numeric", "rest"}, cached
        assert all(cached.values()), f"a dependency layer was rebuilt for a source-only change: {cached}"
        assert "COPY inimage /opt/torchyard/inimage" in log
    finally:
        for image in {before.tag, after.tag}:
            client.images.remove(image)
