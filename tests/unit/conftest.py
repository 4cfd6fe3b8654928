"""Unit tests run with no Docker, no network and no torch: any real subprocess is a bug in the test."""

from __future__ import annotations

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
    yield
