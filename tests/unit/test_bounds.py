"""What a run may write on the host while it runs (`run.bounds`): an untrusted run's cache volume is bounded
wherever the run runs, or the run is refused (issue 70: on a runner that is not root, the bound was left out)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import cast

import docker
import pytest
import requests

from tests.unit.test_run import run_plan
from torchyard.errors import UsageError
from torchyard.run.bounds import Bound, run_bounds
from torchyard.run.container import _over


class Engine:
    """The engine's two answers `run_bounds` reads: a volume's mountpoint, and `docker system df`'s sizes."""

    def __init__(self, mountpoint: str, size: int | None) -> None:
        self.volumes = SimpleNamespace(get=lambda name: SimpleNamespace(attrs={"Mountpoint": mountpoint}))
        self.size = size

    def df(self) -> dict[str, object]:
        named = [] if self.size is None else [{"Name": "torchyard-cache-0123abcd4567-cpu-untrusted-1"}]
        return {"Volumes": [{**v, "UsageData": {"Size": self.size, "RefCount": 1}} for v in named]}


def bounds(engine: Engine, trust: str, stage: Path) -> list[Bound]:
    return list(run_bounds(cast(docker.DockerClient, engine), run_plan("cpu", trust), stage))  # type: ignore[arg-type]


def test_an_untrusted_runs_cache_is_read_where_this_host_can(tmp_path: Path) -> None:
    (bound,) = [b for b in bounds(Engine(str(tmp_path), None), "untrusted", tmp_path) if b.what == "cache"]
    (tmp_path / "filled").write_bytes(b"x" * 4096)
    assert bound.folder == tmp_path and bound.measure is None and bound.size() >= 4096


def test_where_this_host_cannot_read_the_volume_the_engine_counts_it(tmp_path: Path) -> None:
    engine = Engine("/var/lib/docker/volumes/unreadable/_data", 10_000)
    (bound,) = [b for b in bounds(engine, "untrusted", tmp_path) if b.what == "cache"]
    assert bound.size() == 10_000
    engine.size = 2**40  # the run fills it: the watch reads past the bound
    assert bound.size() > bound.limit


def test_where_nothing_can_count_the_volume_an_untrusted_run_is_refused(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="cannot be bounded here"):
        bounds(Engine("/var/lib/docker/volumes/unreadable/_data", -1), "untrusted", tmp_path)
    # a trusted run has no writable scope of the pull request's to bound: only its reports
    assert [b.what for b in bounds(Engine("", None), "trusted", tmp_path)] == ["reports"]


class SlowEngine(Engine):
    """An engine whose count times out once the run has made millions of files (docker-py's 60 s read timeout)."""

    def __init__(self) -> None:
        super().__init__("/var/lib/docker/volumes/unreadable/_data", 10_000)
        self.slow = False

    def df(self) -> dict[str, object]:
        if self.slow:
            raise requests.exceptions.ReadTimeout("read timed out")
        return super().df()


def test_a_count_the_engine_cannot_give_in_time_is_over_the_bound_and_never_stops_the_watch(tmp_path: Path) -> None:
    """A helper's route: the engine's `system df` timed out (requests' ReadTimeout, not an API error), which ended
    the watch's thread, and with it the cache's bound and the host's deadline. Such a count is over the bound."""
    engine = SlowEngine()
    (bound,) = [b for b in bounds(engine, "untrusted", tmp_path) if b.what == "cache"]
    engine.slow = True
    assert bound.size() > bound.limit
    failing = Bound("reports", tmp_path, 10, measure=lambda: 1 // 0)
    assert _over(failing) and not _over(Bound("reports", tmp_path, 10**9))
