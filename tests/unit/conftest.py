"""Unit tests run with no Docker, no network and no torch: any real subprocess is a bug in the test."""

from __future__ import annotations

import multiprocessing.process
import os
import subprocess
from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True)
def _no_real_subprocesses(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    if request.node.get_closest_marker("real_subprocess") is None:

        def refuse(*args: object, **kwargs: object) -> None:
            raise AssertionError(f"unit test started a real subprocess: {args!r}")

        monkeypatch.setattr(subprocess, "run", refuse)
        monkeypatch.setattr(subprocess, "Popen", refuse)
        # The other ways to start a process: multiprocessing's children (fork, spawn and forkserver all
        # start through BaseProcess.start) and the os module's own.
        monkeypatch.setattr(multiprocessing.process.BaseProcess, "start", refuse)
        for name in ("fork", "forkpty", "system", "posix_spawn", "posix_spawnp", "execv", "execve", "execvp"):
            monkeypatch.setattr(os, name, refuse)
    yield
