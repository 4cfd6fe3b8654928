"""The harness's self-tests run beside the suites (`torchyard.contract.pytest_args` names both folders): the
work some of them do in a lane of its own (`beside`), forked from a server started before the run's imports."""

from typing import Any

import pytest

from torchyard.inimage.selftests.beside import Beside, Job, WholeRun
from torchyard.inimage.start.fork_server import selects_harness, start_server
from torchyard.inimage.start.proofs import has_proof

BESIDE = "beside"
_beside_key = pytest.StashKey[Beside]()
_job_key = pytest.StashKey[int]()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{BESIDE}(target, *args) or {BESIDE}(WholeRun(files, args)): target(workdir, *args), or a pytest session "
        "of its own, runs beside the run, started at collection; the test takes its value from the `beside` "
        "fixture and runs last",
    )
    if _may_run_harness(config):
        # Now, not once the tests are collected: its imports then overlap the run's own (torch's dynamo and
        # inductor), on a core that has nothing else to do yet.
        start_server()


def _may_run_harness(config: pytest.Config) -> bool:
    """Whether this process may run the harness's tests: it is not an xdist controller (its workers run
    them), its marker expression, if any, names them, and they are not proven on this stack already (where
    some are not, the lane starts the server with its first fork)."""
    distributed = getattr(config.option, "numprocesses", None) and not hasattr(config, "workerinput")
    expression = config.getoption("markexpr", "")
    return not distributed and (not expression or selects_harness(expression)) and not has_proof(config)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests whose work runs beside the others run last, when that work is most likely done."""
    items.sort(key=lambda item: item.get_closest_marker(BESIDE) is not None)


def pytest_collection_finish(session: pytest.Session) -> None:
    """The work beside the run (`beside.Beside`), which forks from the server (started at configuration,
    or by the first fork here, where configuration could not tell)."""
    jobs: list[Job | WholeRun] = []
    for item in session.items:
        marker = item.get_closest_marker(BESIDE)
        if marker is not None:
            item.stash[_job_key] = len(jobs)
            work = marker.args[0]
            jobs.append(work if isinstance(work, WholeRun) else Job(work, tuple(marker.args[1:])))
    if jobs:
        # An xdist worker collects every test but runs its share: it does a job when its test asks.
        session.stash[_beside_key] = Beside(jobs, forked=not hasattr(session.config, "workerinput"))


@pytest.fixture
def beside(request: pytest.FixtureRequest) -> Any:
    """The value of this test's work beside the run (its `beside` marker)."""
    index = request.node.stash.get(_job_key, None)
    if index is None:
        pytest.fail(f"{request.node.nodeid} asks for `beside` but has no `{BESIDE}` marker")
    return request.session.stash[_beside_key].result(index)


def pytest_sessionfinish(session: pytest.Session) -> None:
    if _beside_key in session.stash:
        session.stash[_beside_key].stop()
