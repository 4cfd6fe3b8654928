"""xdist workers: one per GPU, each seeing only its own device, a case's tests on one worker, none on the CPU."""

from __future__ import annotations

import importlib.util
import os

import pytest

from torchyard import contract
from torchyard.inimage.cases.builtin import CASES
from torchyard.inimage.selftests.whole_runs import REPORTS, whole_run
from torchyard.inimage.start.workers import (
    VISIBLE,
    device_count,
    pin_worker_device,
    worker_id,
    xdist_args,
    xdist_plugin_args,
)

pytestmark = pytest.mark.harness


XDIST = importlib.util.find_spec("xdist") is not None  # an adopter's lock need not have it


@(
    whole_run(
        *xdist_plugin_args({contract.AUTOLOAD_OFF: "1"}),
        *("-n", "0", "-p", "no:cacheprovider", "-p", "no:torchyard.inimage.plugin"),
        conftest="",
        test_one="def test_one():\n    pass\n",
    )
    if XDIST
    else pytest.mark.skip(reason="pytest-xdist is not installed in this image")
)
def test_workers_start_with_plugin_autoloading_off(beside: pytest.RunResult) -> None:
    """torchyard's suites alone run with pytest's plugin autoloading off; xdist is then named, and loads."""
    assert xdist_plugin_args({}) == []
    assert xdist_plugin_args({contract.AUTOLOAD_OFF: "1"}) == ["-p", "xdist.plugin"]
    assert beside.ret == 0, beside.stderr.lines  # `-n` is an option only xdist's plugin adds


def test_workers_one_per_gpu_none_on_the_cpu() -> None:
    assert xdist_args([], "cpu", 0) == []
    assert xdist_args([], "cuda", 1) == []  # one device: in-process, no worker start-up
    assert xdist_args([], "cuda", 4) == ["-n", "4", "--dist", "loadgroup"]
    assert xdist_args(["-n", "2"], "cuda", 4) == []  # the caller's choice stands
    env = {"CUDA_VISIBLE_DEVICES": "2,3"}
    pin_worker_device("cuda", "gw1", env)
    assert env == {"CUDA_VISIBLE_DEVICES": "3"}
    env = {}
    pin_worker_device("rocm", "gw0", env)
    assert env == {"HIP_VISIBLE_DEVICES": "0"}
    pin_worker_device("cpu", "gw0", env)  # nothing to pin on the CPU
    assert env == {"HIP_VISIBLE_DEVICES": "0"}
    # A ROCm runner that gave the job GPUs 4 and 5 as CUDA_VISIBLE_DEVICES (HIP reads it too): worker 1
    # takes 5, never HIP's device 1, another job's; HIP_VISIBLE_DEVICES, where set, is the list HIP uses.
    env = {"CUDA_VISIBLE_DEVICES": "4,5"}
    pin_worker_device("rocm", "gw1", env)
    assert env == {"CUDA_VISIBLE_DEVICES": "4,5", "HIP_VISIBLE_DEVICES": "5"}
    env = {"CUDA_VISIBLE_DEVICES": "0,1,2,3", "HIP_VISIBLE_DEVICES": "2,3"}
    pin_worker_device("rocm", "gw0", env)
    assert env == {"CUDA_VISIBLE_DEVICES": "0,1,2,3", "HIP_VISIBLE_DEVICES": "2"}


CASE_SUITE = "def test_case(case):\n    pass\n"
GROUPED_SUITE = """
import os


def test_compiles(case, request):
    assert request.node.nodeid.endswith("@" + case.name), request.node.nodeid


def test_compares(case, request):
    assert request.node.nodeid.endswith("@" + case.name), request.node.nodeid
    assert os.environ["PYTEST_XDIST_WORKER"].startswith("gw")
"""


@(
    whole_run(
        *xdist_plugin_args({contract.AUTOLOAD_OFF: "1"}),
        *("-n", "2", "--dist", "loadgroup", "-p", "no:cacheprovider"),
        REPORTS,
        test_grouped=GROUPED_SUITE,
    )
    if XDIST
    else pytest.mark.skip(reason="pytest-xdist is not installed in this image")
)
def test_a_cases_tests_go_to_one_worker(beside: pytest.RunResult) -> None:
    """`--dist loadgroup` sends each case's tests (compile, parity, export, runtime) to one worker, which makes
    the case's reference once and compiles it once: xdist names the group in each item's id, from the marks
    the plugin adds, which it must add first. Two workers, every built-in case's tests: each test checks
    its own id. The check `pytest<9.2` in the locks stands on (pytest-dev/pytest-xdist#1386)."""
    outcomes = beside.parseoutcomes()
    # At least the built-in cases' tests: an adopter's own cases (its entry points) join them.
    assert beside.ret == 0 and outcomes.get("passed", 0) >= 2 * len(CASES), beside.stdout.lines[-30:]


@whole_run("-p", "no:xdist", "--strict-markers", "-p", "no:cacheprovider", REPORTS, test_cases=CASE_SUITE)
def test_a_run_without_xdist_marks_no_group(beside: pytest.RunResult) -> None:
    """Without xdist (`-p no:xdist`, or a lock without it) its `xdist_group` mark is unknown: an adopter saw
    `PytestUnknownMarkWarning` for it, and under --strict-markers the run stopped before its first test."""
    assert beside.ret == 0, beside.stdout.lines[-20:]
    assert "xdist_group" not in beside.stdout.str()


def test_a_worker_sees_only_its_own_device(request: pytest.FixtureRequest) -> None:
    """In an xdist worker on a GPU, the visible-device variable names one device and torch sees one: what
    `pin_worker_device` set before torch touched the device holds."""
    accelerator = os.environ.get(contract.ACCELERATOR, "cpu")
    worker = worker_id(request.config)
    variable = VISIBLE.get(accelerator)
    if worker == "main" or variable is None:
        pytest.skip("no worker's device to check: " + ("not an xdist worker" if worker == "main" else accelerator))
    visible = os.environ.get(variable, "")
    assert visible and "," not in visible, f"{worker}: {variable}={visible!r}"
    assert device_count(accelerator) == 1, f"{worker}: {variable}={visible!r}"
