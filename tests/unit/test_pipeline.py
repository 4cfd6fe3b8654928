"""The steps of a run, in the order `torchyard build` and `torchyard test` take them, without Docker."""

from __future__ import annotations

import dataclasses
import re
import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest

from torchyard import pipeline
from torchyard.errors import ConfigError, DeviceUnavailableError, StaleLockError, UsageError
from torchyard.image.plan import BuildOptions
from torchyard.matrix import load_plan
from torchyard.matrix.machine import Limits, Machine
from torchyard.trust import RunTrust, resolve_trust

PLAN = load_plan(Path(__file__).parents[2] / "matrix.toml")
PROJECT = "torchyard-0123abcd4567"


def nothing_runs(args: object, **kwargs: object) -> None:
    raise AssertionError(f"ran {args!r}")


def test_one_list_of_steps_serves_both_commands() -> None:
    assert pipeline.STEPS[: len(pipeline.BUILD_STEPS)] == pipeline.BUILD_STEPS
    assert pipeline.BUILD_STEPS[-1] is pipeline.summarize_images
    order = [step.__name__ for step in pipeline.STEPS]
    # A test fails fast on its devices before any lock check; nothing is built before every lock is fresh.
    assert order.index("check_devices") < order.index("check_locks") < order.index("build_or_reuse_images")
    assert order.index("build_or_reuse_images") < order.index("run_containers") < order.index("summarize_runs")


def test_untrusted_runs_are_refused_outside_a_container_unless_unsandboxed(tmp_path: Path) -> None:
    modes: tuple[pipeline.Mode, ...] = ("local", "in-place")
    for mode in modes:
        with pytest.raises(UsageError) as caught:
            pipeline.run_tests(
                [PLAN.entry("cpu")], mode=mode, lockdir=tmp_path, reports=tmp_path, pytest_args=[],
                machine=Machine(), trust=RunTrust("untrusted", "the pull_request event"),
                runner=nothing_runs,  # type: ignore[arg-type]
                env={},
            )  # fmt: skip
        assert str(caught.value) == (
            f"an untrusted run (the pull_request event) does not run cpu unsandboxed: --{mode} runs the project's "
            "code on this host, with its files and environment; pass --unsandboxed to run it anyway"
        )


def test_a_native_entry_on_the_wrong_host_stops_before_any_venv_or_docker(tmp_path: Path) -> None:
    with pytest.raises(DeviceUnavailableError) as caught:
        pipeline.run_tests(
            [PLAN.entry("mps")], mode="container", lockdir=tmp_path, reports=tmp_path, pytest_args=[],
            machine=Machine(), trust=resolve_trust(None, {}), runner=nothing_runs,  # type: ignore[arg-type]
            env={},
        )  # fmt: skip
    assert str(caught.value).startswith("entry 'mps' needs an mps device: no Apple GPU: MPS runs on macOS")


def test_a_missing_lock_stops_the_build_before_docker(tmp_path: Path) -> None:
    def uv_only(args: Sequence[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
        assert list(args)[:2] == ["uv", "--version"]
        return subprocess.CompletedProcess(args, 0, "uv 0.13.9\n", "")

    with pytest.raises(StaleLockError, match=r"entry 'cuda': lock is missing: run `nox -s lock -- cuda`"):
        pipeline.build_images(
            [PLAN.entry("cuda")], tmp_path, BuildOptions(), machine=Machine(), project=PROJECT, runner=uv_only, env={}
        )


def test_a_build_of_native_entries_names_them_and_ends_before_any_check(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    built = pipeline.build_images(
        [PLAN.entry("mps")], tmp_path, BuildOptions(push=True), machine=Machine(), project=PROJECT,
        runner=nothing_runs,  # type: ignore[arg-type]
        env={},
    )  # fmt: skip
    assert built == []
    assert capsys.readouterr().out == "entry 'mps' runs natively (mps): there is no image to build\n"


def test_each_runs_exit_status_is_in_the_step_summary(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The parity tables a run wrote can show no failure where the run failed (a self-test, an empty suite):
    the host's table of exit statuses goes into the step summary as it goes to the terminal."""
    summary = tmp_path / "summary.md"
    tests = pipeline.Tests("container", tmp_path, [], resolve_trust(None, {}))
    request = pipeline.Request(
        (PLAN.entry("cpu"),), tmp_path, Machine(), PROJECT, nothing_runs,  # type: ignore[arg-type]
        {"GITHUB_STEP_SUMMARY": str(summary)}, tests=tests,
    )  # fmt: skip
    progress = pipeline.Progress([], ran=[("cpu", "torchyard/p/cpu:abc", "1", "reports/cpu")])
    pipeline.summarize_runs(request, progress)
    row = "| cpu   | torchyard/p/cpu:abc | 1           | reports/cpu |"
    assert row in capsys.readouterr().out
    assert summary.read_text().startswith("### torchyard runs\n\n| entry | image") and row in summary.read_text()


def test_a_resource_flag_above_the_machines_limit_stops_the_run_before_any_build() -> None:
    """Issue 59: refused with the devices, before a lock is checked or an image built (it was refused only
    once the images were built)."""
    entry = PLAN.entry("cpu")
    flagged = dataclasses.replace(
        entry, accelerator=dataclasses.replace(entry.accelerator, docker_run=("--memory", "64g"))
    )
    machine = Machine(limits=Limits(memory="12g"))
    with pytest.raises(ConfigError, match=r"--memory 64g is above this machine's 12g"):
        pipeline.check_limits([flagged], machine, 64 << 30)
    pipeline.check_limits([entry], machine, 64 << 30)


@pytest.mark.parametrize(
    ("flags", "trusted", "refused"),
    [
        (("--privileged",), False, "an untrusted run's container keeps the seal: --privileged"),
        (("--ipc", "host"), False, "--ipc=host is given to trusted runs only"),
        (("--cap-add=SYS_ADMIN",), False, "--cap-add=SYS_ADMIN is given to trusted runs only"),
        (("--label", "x", "attacker/img"), True, "'attacker/img' would be taken for the image"),
        (("--privileged",), True, ""),
    ],
)
def test_a_flag_the_run_would_refuse_stops_it_before_any_build(
    flags: tuple[str, ...], trusted: bool, refused: str
) -> None:
    """Issue 72: the seal's option checks ran once the images were built; a refused flag now costs no image."""
    entry = PLAN.entry("cpu")
    flagged = dataclasses.replace(entry, accelerator=dataclasses.replace(entry.accelerator, docker_run=flags))
    machine = Machine(limits=Limits(memory="12g"))
    if refused:
        with pytest.raises(ConfigError, match=re.escape(refused)):
            pipeline.check_limits([flagged], machine, 64 << 30, trusted=trusted)
    else:
        pipeline.check_limits([flagged], machine, 64 << 30, trusted=trusted)
