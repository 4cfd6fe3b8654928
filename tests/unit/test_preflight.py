"""Before a build: the engine's disk holds what the build writes, with a margin, and the base has the entry's
Python, looked for in a sealed container."""

from __future__ import annotations

import dataclasses
import os
import subprocess
from collections.abc import Sequence

import pytest

from torchyard.errors import ImageBuildError
from torchyard.image.held import Held
from torchyard.image.plan import BuildPlan
from torchyard.image.preflight import base_probe, check_base, needs_more_than_free
from torchyard.seal import run_user, sealed_run


def test_a_build_needs_its_last_image_size_and_a_margin() -> None:
    assert needs_more_than_free(6 << 30, 7 << 30)
    assert not needs_more_than_free(6 << 30, 9 << 30)
    assert not needs_more_than_free(0, 0)  # nothing to estimate from


def _plan(vendor: tuple[str, ...] = ()) -> BuildPlan:
    return BuildPlan(
        entry="cpu", base_image="debian@sha256:" + "0" * 64, build_args=(), tag="t", alias="a", vendor=vendor,
        python="3.12", context=(), project_root=None, project_files=(),
    )  # fmt: skip


HELD = Held(base=True, last=None, trusted_alias=False, dependency=False, labelled=(), root=None)


class Recorder:
    def __init__(self, status: int) -> None:
        self.status = status
        self.calls: list[Sequence[str]] = []

    def __call__(self, args: Sequence[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
        self.calls.append(tuple(args))
        return subprocess.CompletedProcess(list(args), self.status, "", "")


def test_the_base_check_runs_sealed_like_every_helper() -> None:
    """Issue 57, also found: the base check was the one container torchyard started unsealed (the SDK's
    `containers.run`, as root, with the network and no limits)."""
    runner = Recorder(0)
    check_base(object(), _plan(), HELD, docker_path="/usr/bin/docker", runner=runner, env={})  # type: ignore[arg-type]
    (args,) = runner.calls
    helper = base_probe(_plan(), name=args[4].removesuffix("-base"), user=run_user(os.getuid(), os.getgid()))
    assert args == ("/usr/bin/docker", *sealed_run(helper))
    assert args[args.index("--entrypoint") + 1 : args.index("--entrypoint") + 3] == (
        "/usr/bin/timeout",
        _plan().base_image,
    )
    for sealed in ("--read-only", "--cap-drop", "--pids-limit", "--memory"):
        assert sealed in args
    assert args[args.index("--network") + 1] == "none" and args[args.index("--user") + 1] != "0:0"


@pytest.mark.parametrize(
    ("status", "vendor", "message"),
    [
        (1, (), r"base image debian@sha256:0+ has no python3\.12 and no apt-get to install it"),
        (1, ("torch",), r"base image debian@sha256:0+ has no python3\.12$"),
        (127, (), r"the check of base image debian@sha256:0+ failed with exit status 127"),
    ],
)
def test_a_base_without_python_is_one_line(status: int, vendor: tuple[str, ...], message: str) -> None:
    with pytest.raises(ImageBuildError, match=message):
        check_base(object(), _plan(vendor), HELD, runner=Recorder(status), env={})  # type: ignore[arg-type]


def test_a_base_the_build_pulls_is_not_probed() -> None:
    runner = Recorder(0)
    check_base(object(), _plan(), dataclasses.replace(HELD, base=False), runner=runner, env={})  # type: ignore[arg-type]
    assert runner.calls == []
