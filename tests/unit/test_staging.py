"""A container writes into a private staging folder; `--reports` (what the workflows upload with `if: always()`)
gets only what the hand-back vetted and the host stamped, and a run stopped midway leaves it empty."""

from __future__ import annotations

import dataclasses
import fcntl
import itertools
import os
import time
from pathlib import Path

import pytest

from torchyard.errors import ConfigError, UsageError
from torchyard.run.container import (
    RunPlan,
    container_bound,
    docker_run_args,
    docker_run_options,
    hand_over,
    run_entry,
    staged_reports,
)
from torchyard.run.scopes import DEADLINE_LABEL
from torchyard.run.staging import abandoned, holding, make_stage, sweep_stages

from .test_run import HOST, PLAN, run_plan

FACTS = {"trust": "untrusted", "entry": "cpu", "image": "torchyard/cpu:0123456789abcdef"}


def plan_in(tmp_path: Path, **changes: object) -> RunPlan:
    plan = dataclasses.replace(
        run_plan("cpu", "untrusted"), reports=tmp_path / "reports" / "cpu", staging=tmp_path / "staging"
    )
    return dataclasses.replace(plan, **changes)  # type: ignore[arg-type]


def test_the_container_mounts_the_stage_never_the_reports_folder(tmp_path: Path) -> None:
    plan = plan_in(tmp_path)
    args = docker_run_args(PLAN.entry("cpu"), plan, HOST, {}, [])
    assert f"type=bind,source={plan.stage},target=/reports" in args
    assert not any(str(plan.reports) in arg for arg in args)


def test_a_run_stopped_midway_leaves_the_reports_empty_and_no_stage(tmp_path: Path) -> None:
    """Issue 57, route 2: a stopped run left the container's links in the folder the workflow uploads."""
    secret = tmp_path / "credentials"
    secret.write_text("the runner's key\n")
    plan = plan_in(tmp_path)
    with pytest.raises(KeyboardInterrupt), staged_reports(plan, os.getuid()) as stage:
        (stage / "runner-key").symlink_to(secret)
        (stage / "parity.md").write_text("### torchyard parity: cpu, trusted run\n")
        raise KeyboardInterrupt  # SIGTERM, as the CLI turns it
    assert list(plan.reports.iterdir()) == []
    assert not plan.stage.exists()


def test_what_reaches_the_reports_was_vetted_and_stamped(tmp_path: Path) -> None:
    secret = tmp_path / "credentials"
    secret.write_text("the runner's key\n")
    plan = plan_in(tmp_path)
    with staged_reports(plan, os.getuid()) as stage:
        (stage / "runner-key").symlink_to(secret)
        (stage / "inner").mkdir()
        (stage / "inner" / "key").symlink_to(secret)
        (stage / "inner" / "junit.xml").write_text("<testsuites/>")
        (stage / "parity.md").write_text("### torchyard parity: cpu, trusted run\n")
        os.mkfifo(stage / "fifo")
        hand_over(stage, plan, FACTS)
    found = sorted(str(path.relative_to(plan.reports)) for path in plan.reports.rglob("*"))
    assert found == ["env.json", "inner", "inner/junit.xml", "parity.md"]
    assert "**untrusted** run" in (plan.reports / "parity.md").read_text().splitlines()[0]
    assert not any(path.is_symlink() for path in plan.reports.rglob("*"))
    assert not plan.stage.exists()


def test_the_staging_root_is_a_private_folder_of_this_users(tmp_path: Path) -> None:
    """A link or an open folder planted where the staging root goes (a shared /tmp) is refused in one line."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "linked").symlink_to(elsewhere)
    with pytest.raises(UsageError, match="not a private folder"):
        make_stage(tmp_path / "linked" / "torchyard-cpu-1", None)
    (tmp_path / "open").mkdir(mode=0o777)
    (tmp_path / "open").chmod(0o777)
    with pytest.raises(UsageError, match="not a private folder"):
        make_stage(tmp_path / "open" / "torchyard-cpu-1", None)
    assert list(elsewhere.iterdir()) == []


def test_stages_of_gone_containers_are_swept_and_a_live_ones_kept(tmp_path: Path) -> None:
    root = tmp_path / "staging"
    for name in ("torchyard-cpu-dead", "torchyard-cpu-live"):
        stage = make_stage(root / name, None)
        (stage / "key").symlink_to("/etc/shadow")
        deep = stage
        for _ in range(40):
            deep = deep / "d"
        deep.mkdir(parents=True)
    assert sweep_stages(root, {"torchyard-cpu-live"}) == ["torchyard-cpu-dead"]
    assert [item.name for item in root.iterdir()] == ["torchyard-cpu-live"]


def test_a_run_with_a_deadline_is_bounded_inside_the_container_and_labelled() -> None:
    """A torchyard killed outright (its step cancelled) leaves a container that ends on its own, and a label
    the next run or prune removes it by."""
    plan = dataclasses.replace(run_plan("cpu"), timeout_s=600, ends_at=1_900_000_000)
    args = docker_run_args(PLAN.entry("cpu"), plan, HOST, {}, [])
    image = args.index(plan.image)
    assert args[image - 0 : image + 5] == (plan.image, f"{container_bound(plan)}", "30", "1000:1000", "--")
    assert args[image + 5 : image + 8] == ("/opt/torchyard/venv/bin/python", "-m", "torchyard.inimage")
    options = docker_run_options(PLAN.entry("cpu"), plan, HOST, {}, [])
    assert ("--entrypoint", "/opt/torchyard/warden") in itertools.pairwise(options) and "--init" not in options
    assert f"{DEADLINE_LABEL}=1900000000" in options
    assert container_bound(plan) > plan.timeout_s


def test_the_entrypoint_the_bound_names_is_the_dockerfiles() -> None:
    dockerfile = (Path(__file__).parents[2] / "docker" / "Dockerfile").read_text()
    assert 'ENTRYPOINT ["/opt/torchyard/venv/bin/python", "-m", "torchyard.inimage"]' in dockerfile
    # the warden: the base's interpreter, isolated, by the path its first line names; root's, read-only
    warden = Path(__file__).parents[2] / "src" / "torchyard" / "inimage" / "start" / "warden.py"
    assert warden.read_text().splitlines()[0] == "#!/opt/torchyard/warden-python -IS"
    assert "COPY inimage/torchyard/inimage/start/warden.py /opt/torchyard/warden\n" in dockerfile
    assert 'ln -s "$(cat /opt/torchyard/base-python)" /opt/torchyard/warden-python' in dockerfile
    assert "chmod 0555 /opt/torchyard/warden" in dockerfile


class Untouchable:
    """An engine client the run must not reach: the seal is checked before any engine call."""

    def __getattr__(self, name: str) -> object:
        raise AssertionError(f"the engine was used ({name}) before the seal was checked")


def test_the_untrusted_seal_reads_every_option_not_up_to_a_value_equal_to_the_image(tmp_path: Path) -> None:
    """Issue 57, route 4: the check stopped at the first argument equal to the image's tag, so a label with
    that value hid `--ipc=host` (and its variants) from it."""
    plan = plan_in(tmp_path)
    entry = PLAN.entry("cpu")
    for flags in (
        ("--label", plan.image, "--ipc=host"),
        ("--label", f"x={plan.image}", "--label", plan.image, "--pid", "host"),
        ("--env", f"IMAGE={plan.image}", "--label", plan.image, "--security-opt", "seccomp=unconfined"),
    ):
        planted = dataclasses.replace(entry, accelerator=dataclasses.replace(entry.accelerator, docker_run=flags))
        with pytest.raises(ConfigError, match="keeps the seal"):
            run_entry(
                planted,
                plan,
                client=Untouchable(),  # type: ignore[arg-type]
                docker_path="docker",
                host=HOST,
                pytest_args=[],
            )


def test_a_deadline_in_the_past_is_what_sweeping_reads() -> None:
    """The label holds a Unix time: what `sweep_leftovers` and prune compare with now."""
    plan = dataclasses.replace(run_plan("cpu"), timeout_s=60, ends_at=int(time.time()) - 1)
    options = docker_run_options(PLAN.entry("cpu"), plan, HOST, {}, [])
    value = next(item for item in options if item.startswith(DEADLINE_LABEL + "="))
    assert int(value.partition("=")[2]) < time.time()


class FakeVolumes:
    """Volumes by name, with the labels the engine keeps: those of the scope a test makes them for."""

    def __init__(self, existing: dict[str, dict[str, str]]) -> None:
        self.existing = existing
        self.attrs: dict[str, object] = {}

    def get(self, name: str) -> object:
        import docker.errors

        if name not in self.existing:
            raise docker.errors.NotFound(name)
        self.attrs = {"Labels": self.existing[name]}
        return self

    def create(self, name: str, labels: dict[str, str]) -> None:
        self.existing.setdefault(name, labels)

    def remove(self, force: bool = False) -> None:
        return None


class FakeContainers:
    def __init__(self) -> None:
        self.created: list[str] = []

    def create(self, image: str, **kwargs: object) -> FakeContainers:
        self.created.append(image)
        return self

    def remove(self, force: bool = False) -> None:
        return None


class FakeClient:
    def __init__(self, existing: dict[str, dict[str, str]]) -> None:
        self.volumes = FakeVolumes(existing)
        self.containers = FakeContainers()


def test_the_seed_copies_in_the_trusted_base_never_the_runs_own_image(tmp_path: Path) -> None:
    """Issue 57, route 5: the seed ran the pull request's image, whose `/seed` Docker copied into an empty
    trusted volume. Now the copy runs in the base the trusted matrix pins; the run's image is only created
    (never started) to give the run's own volume its folder."""
    from torchyard.run.container import prepare_cache

    plan = dataclasses.replace(plan_in(tmp_path), seed_image="debian@sha256:" + "1" * 64)
    trusted = {**plan.scope.labels(PLAN.entry("cpu")), "dev.torchyard.trust": "trusted"}
    client = FakeClient({plan.scope.seed or "": trusted})
    commands: list[tuple[str, ...]] = []
    prepare_cache(
        PLAN.entry("cpu"), plan, client=client, docker_path="docker",  # type: ignore[arg-type]
        runner=lambda args, **kwargs: commands.append(tuple(args)), env={},  # type: ignore[arg-type]
    )  # fmt: skip
    (seed,) = commands
    assert plan.seed_image in seed and plan.image not in seed
    assert all("volume-nocopy" in arg for arg in seed if arg.startswith("type=volume"))
    assert client.containers.created == [plan.image]
    unseeded = dataclasses.replace(plan, seed_image="")
    commands.clear()
    prepare_cache(
        PLAN.entry("cpu"), unseeded, client=FakeClient({plan.scope.seed or "": trusted}), docker_path="docker",  # type: ignore[arg-type]
        runner=lambda args, **kwargs: commands.append(tuple(args)), env={},  # type: ignore[arg-type]
    )  # fmt: skip
    assert commands == []


def test_the_deadline_fits_inside_what_is_left_of_the_jobs_time(capsys: pytest.CaptureFixture[str]) -> None:
    """The job's end is a moment, not a length: a run that starts late in its job (a slow cold build) gets what
    is left, less the hand-back's margin, and one that has no time left stops in one line."""
    from torchyard.errors import DeviceUnavailableError
    from torchyard.matrix.machine import Limits
    from torchyard.run.container import JOB_MARGIN_S, _timeout

    entry = dataclasses.replace(PLAN.entry("cpu"), timeout="5h")
    ends = {"TORCHYARD_JOB_ENDS_AT": str(10_000 + 120 * 60)}
    assert _timeout(entry, Limits(), {}) == 5 * 3600
    assert _timeout(entry, Limits(), ends, now=10_000) == 120 * 60 - JOB_MARGIN_S
    assert _timeout(entry, Limits(), ends, now=10_000 + 65 * 60) == 55 * 60 - JOB_MARGIN_S
    assert "inside the CI job's time" in capsys.readouterr().out
    short = dataclasses.replace(entry, timeout="30m")
    assert _timeout(short, Limits(), ends, now=10_000) == 30 * 60
    with pytest.raises(DeviceUnavailableError, match=r"the CI job ends in .*raise the job's timeout-minutes"):
        _timeout(entry, Limits(), ends, now=10_000 + 118 * 60)
    with pytest.raises(ConfigError, match="TORCHYARD_JOB_ENDS_AT"):
        _timeout(entry, Limits(), {"TORCHYARD_JOB_ENDS_AT": "soon"})


def test_a_container_whose_run_is_gone_is_known_by_its_unheld_staging_folder(tmp_path: Path) -> None:
    """Issue 70: a container outlived its cancelled run and deadline (its own `timeout` stopped by its tests);
    the next run's sweep now removes it at once, where its run no longer holds its staging folder."""
    root = tmp_path / "staging"
    stage = make_stage(root / "torchyard-cpu-abc", None)
    assert abandoned(root, stage.name)  # nobody holds it: its run is gone
    with holding(stage):
        assert not abandoned(root, stage.name)  # a live run's
    assert not abandoned(root, "torchyard-cpu-other")  # no folder here: another user's run, or none
    (root / "link").symlink_to(stage)
    assert not abandoned(root, "link")


def test_a_lock_the_container_takes_on_its_reports_folder_does_not_keep_a_dead_runs_container(tmp_path: Path) -> None:
    """A helper's route: the staging folder is the container's /reports, and the run held it by a lock on the
    folder itself; the tests took that lock once the run died, so the container looked alive to every sweep
    until its deadline. The run's lock is a file beside the folder, which the container cannot reach."""
    root = tmp_path / "staging"
    stage = make_stage(root / "torchyard-cpu-abc", None)
    inside = os.open(stage, os.O_RDONLY | os.O_DIRECTORY)  # what a test in the container can open: /reports
    try:
        with holding(stage):
            assert not abandoned(root, stage.name)
            fcntl.flock(inside, fcntl.LOCK_EX | fcntl.LOCK_NB)  # the folder's own lock is no run's
        assert abandoned(root, stage.name)  # the run is gone, whatever the container holds
    finally:
        os.close(inside)
    assert sweep_stages(root, set()) == [stage.name]
    assert list(root.iterdir()) == []  # the folder and its lock both gone
