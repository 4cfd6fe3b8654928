"""The exact `docker run` argument lists per accelerator, and the fail-fast device check."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from tests.unit.test_accelerators import fake_drm, fake_kfd
from torchyard import contract
from torchyard.accelerators import ACCELERATORS, HostFacts
from torchyard.accelerators.protocol import NO_NVIDIA_DEVICES
from torchyard.errors import ConfigError, DeviceUnavailableError, UsageError
from torchyard.matrix import load_plan
from torchyard.matrix.machine import Limits
from torchyard.run.container import RunPlan, docker_run_args, docker_run_options, require_device_runtime
from torchyard.run.inplace import require_stack, run_in_place
from torchyard.run.scopes import cache_scope, seed_args
from torchyard.run.venv import stage_inimage, sync_venv
from torchyard.seal import Seal, check_untrusted_seal, helper_args, loosening, warden_options
from torchyard.trust import Trust

PLAN = load_plan(Path(__file__).parents[2] / "matrix.toml")
HOST = HostFacts(
    group_ids={"video": 44, "render": 993},
    device_nodes=frozenset({"/dev/kfd", "/dev/dri"}),
    docker_runtimes=frozenset({"nvidia"}),
)


def run_plan(entry: str, trust: Trust = "trusted") -> RunPlan:
    return RunPlan(
        entry,
        f"torchyard/{entry}:0123456789abcdef",
        f"torchyard-{entry}-1",
        Path("/src/reports/" + entry),
        cache_scope(PLAN.entry(entry), "0123abcd4567", trust, "1"),
        "1000:1000",
        Seal(Limits(), "12g"),
        staging=Path("/stage"),
    )


def common(entry: str) -> tuple[str, ...]:
    return (
        "run", "--name", f"torchyard-{entry}-1", "--entrypoint", "/opt/torchyard/warden",
        "--label", f"dev.torchyard.entry={entry}",
        "--label", "dev.torchyard.scope=0123abcd4567",
        "--label", "dev.torchyard.trust=trusted",
        "--mount", f"type=bind,source=/stage/torchyard-{entry}-1,target=/reports",
        "--mount", f"type=volume,source=torchyard-cache-0123abcd4567-{entry},target=/cache/inductor",
        "--mount", f"type=volume,source=torchyard-cache-0123abcd4567-{entry},target=/tmp/torchinductor_torchyard",
        "--workdir", "/workspace",
        "--network", "none",
        "--cap-drop", "ALL",
        "--security-opt", "no-new-privileges",
        "--read-only",
        "--tmpfs", "/tmp:rw,exec,nosuid,nodev,mode=1777,size=4g",
        "--tmpfs", "/home/torchyard:rw,exec,nosuid,nodev,mode=1777,size=1g",
        "--pids-limit", "4096",
        "--memory", "12g", "--memory-swap", "12g",
        "--log-driver", "json-file", "--log-opt", "max-size=16m", "--log-opt", "max-file=1",
    )  # fmt: skip


def env_args(**variables: str) -> tuple[str, ...]:
    """`--env NAME=VALUE` for each variable, in the order of their names, as torchyard passes them."""
    return tuple(arg for name in sorted(variables) for arg in ("--env", f"{name}={variables[name]}"))


def tail(
    entry: str, markers: str, suites: str = "export,compile,runtime,parity,train", user: str = "1000:1000"
) -> tuple[str, ...]:
    """torchyard's own variables (after every flag that could set them), the image and pytest's arguments."""
    return (
        "--env", "LOGNAME=torchyard",
        "--env", "TORCHYARD_TRUST=trusted",
        "--env", "PYTHONHASHSEED=0",
        *env_args(
            TORCHYARD_ACCELERATOR=entry,
            TORCHYARD_CASES="",
            TORCHYARD_PRECISION="fp32",
            TORCHYARD_REPORT_DIR="/reports",
            TORCHYARD_SUITES=suites,
            TORCHYARD_TOLERANCES="{}",
            # The entry's options (none set: their defaults), each by its row (`test_contract.py`).
            **{row.variable: row.default for row in contract.ENTRY_OPTIONS},
        ),
        # the warden's own, last: no option before them sets the user
        "--user", "0:0", "--cap-add", "KILL", "--cap-add", "SETUID", "--cap-add", "SETGID",
        "--cap-add", "SETPCAP", "--no-healthcheck",
        f"torchyard/{entry}:0123456789abcdef",
        "0", "30", user, "--",  # the warden: no deadline, its command run as the caller (never root)
        "/opt/torchyard/venv/bin/python", "-m", "torchyard.inimage",
        "/opt/torchyard/inimage/torchyard/inimage/suites",
        "/opt/torchyard/inimage/torchyard/inimage/selftests",
        "-p", "torchyard.inimage.plugin",
        "-p", "no:cacheprovider",
        "-m", markers,
        "--junitxml=/reports/junit.xml",
        "-q",
    )  # fmt: skip


ALL = "export or compile or runtime or parity or train or harness"


def test_cpu_run_args() -> None:
    args = docker_run_args(PLAN.entry("cpu"), run_plan("cpu"), HOST, {}, ["-q"])
    assert args == (*common("cpu"), *NO_NVIDIA_DEVICES, *tail("cpu", ALL))


def test_every_run_names_its_image_so_a_later_reuse_finds_what_a_plain_run_kept() -> None:
    """A plain run keeps its verdicts under the image's ID; the next --reuse-results run looks them up by it."""
    plan = dataclasses.replace(run_plan("cpu"), image_id="sha256:" + "a" * 64)
    plain = docker_run_args(PLAN.entry("cpu"), plan, HOST, {}, [])
    reused = docker_run_args(PLAN.entry("cpu"), plan, HOST, {"TORCHYARD_REUSE_RESULTS": "1"}, [])
    image_id = ("--env", "TORCHYARD_IMAGE_ID=sha256:" + "a" * 64)
    for args in (plain, reused):
        assert any(args[i : i + 2] == image_id for i in range(len(args) - 1))
    assert "TORCHYARD_REUSE_RESULTS=1" in reused and "TORCHYARD_REUSE_RESULTS=1" not in plain


def test_third_party_plugins_load_only_for_a_project_or_the_callers_arguments() -> None:
    """torchyard's suites alone load torchyard's plugin (and xdist), not what the image has besides."""
    autoload_off = ("--env", "PYTEST_DISABLE_PLUGIN_AUTOLOAD=1")

    def has_autoload_off(args: tuple[str, ...]) -> bool:
        return any(args[i : i + 2] == autoload_off for i in range(len(args) - 1))

    cpu = PLAN.entry("cpu")
    assert has_autoload_off(docker_run_args(cpu, run_plan("cpu"), HOST, {}, []))
    assert not has_autoload_off(docker_run_args(cpu, run_plan("cpu"), HOST, {}, ["--timeout=60"]))
    with_tests = dataclasses.replace(cpu, tests=("tests",))
    assert not has_autoload_off(docker_run_args(with_tests, run_plan("cpu"), HOST, {}, []))


def test_cuda_run_args_request_the_selected_gpu() -> None:
    args = docker_run_args(PLAN.entry("cuda"), run_plan("cuda"), HOST, {"CUDA_VISIBLE_DEVICES": "1"}, ["-q"])
    assert args == (
        *common("cuda"),
        "--gpus", '"device=1"',
        "-e", "NVIDIA_DRIVER_CAPABILITIES=compute,utility", "-e", "NVIDIA_TF32_OVERRIDE=0", "--shm-size", "16g",
        *tail("cuda", ALL),
    )  # fmt: skip


def test_rocm_run_args(tmp_path: Path) -> None:
    host = dataclasses.replace(HOST, sysfs=fake_kfd(tmp_path, {1: (128, 1), 2: (129, 2)}))
    args = docker_run_args(PLAN.entry("rocm"), run_plan("rocm"), host, {"HIP_VISIBLE_DEVICES": "1"}, ["-q"])
    assert args == (
        *common("rocm"),
        "--device", "/dev/kfd", "--device", "/dev/dri/renderD129",
        "--group-add", "44", "--group-add", "993",
        "--shm-size", "16g", *NO_NVIDIA_DEVICES,
        *tail("rocm", "export or compile or runtime or parity or harness", "export,compile,runtime,parity",
              "1000:1000:44,993"),  # the devices' groups: the warden gives them to the command
    )  # fmt: skip


def test_xpu_run_args_follow_its_suites(tmp_path: Path) -> None:
    host = dataclasses.replace(HOST, sysfs=fake_drm(tmp_path, {128: ("0000:3a:00.0", "0x8086")}))
    args = docker_run_args(PLAN.entry("xpu"), run_plan("xpu"), host, {"ZE_AFFINITY_MASK": "0.0"}, ["-q"])
    assert args == (
        *common("xpu"),
        "--device", "/dev/dri/renderD128", "--group-add", "993", "--shm-size", "16g",
        "--env", "ZE_AFFINITY_MASK=0.0", *NO_NVIDIA_DEVICES,
        *tail("xpu", "export or compile or parity or harness", "export,compile,parity", "1000:1000:993"),
    )  # fmt: skip


def test_gpu_entry_without_its_runtime_fails_before_anything_runs() -> None:
    with pytest.raises(DeviceUnavailableError) as caught:
        require_device_runtime(PLAN.entry("cuda"), HostFacts(), {})
    assert str(caught.value).startswith("entry 'cuda' needs a cuda device: no NVIDIA container runtime or CDI spec")
    require_device_runtime(PLAN.entry("cpu"), HostFacts(), {})


def test_a_network_the_machine_allows_keeps_the_rest_of_the_seal() -> None:
    entry = dataclasses.replace(PLAN.entry("cpu"), network="downloads its weights from the hub")
    plan = dataclasses.replace(run_plan("cpu"), seal=Seal(Limits(memory="8g", pids=512), "8g", network=True))
    args = docker_run_args(entry, plan, HOST, {}, [])
    assert "--network" not in args
    seal = args[args.index("--cap-drop") :]
    assert seal[:10] == (
        "--cap-drop", "ALL", "--security-opt", "no-new-privileges", "--read-only",
        "--tmpfs", "/tmp:rw,exec,nosuid,nodev,mode=1777,size=4g",
        "--tmpfs", "/home/torchyard:rw,exec,nosuid,nodev,mode=1777,size=1g",
        "--pids-limit",
    )  # fmt: skip
    assert seal[10:15] == ("512", "--memory", "8g", "--memory-swap", "8g")


def test_an_untrusted_run_mounts_its_own_cache_seeded_from_the_trusted_scope() -> None:
    plan = run_plan("cpu", "untrusted")
    args = docker_run_args(PLAN.entry("cpu"), plan, HOST, {}, [])
    own = "torchyard-cache-0123abcd4567-cpu-untrusted-1"
    assert f"type=volume,source={own},target=/cache/inductor" in args
    assert "dev.torchyard.trust=untrusted" in args and "TORCHYARD_TRUST=untrusted" in args
    assert not any("source=torchyard-cache-0123abcd4567-cpu," in arg for arg in args)  # never the trusted scope
    assert plan.scope.ephemeral and plan.scope.seed == "torchyard-cache-0123abcd4567-cpu"
    assert seed_args(plan.scope, plan.scope.seed, image="img", user="1000:1000", name="n") == (
        "run", "--rm", "--name", "n-seed", *helper_args("1000:1000", warden=False),
        "--mount", "type=volume,source=torchyard-cache-0123abcd4567-cpu,target=/seed,readonly,volume-nocopy",
        "--mount", f"type=volume,source={own},target=/cache/inductor,volume-nocopy",
        "--entrypoint", "/usr/bin/timeout", "img", "--signal=KILL", "1800",  # the entry's base: no warden there
        "/bin/cp", "-R", "/seed/.", "/cache/inductor/",
    )  # fmt: skip


def test_apple_silicon_is_what_mps_needs() -> None:
    assert ACCELERATORS["mps"].host_problems(HostFacts(system="Darwin", machine="arm64"), {}) == ()
    assert ACCELERATORS["mps"].NATIVE and not ACCELERATORS["cuda"].NATIVE
    (problem,) = ACCELERATORS["mps"].host_problems(HostFacts(system="Darwin", machine="x86_64"), {})
    assert "this host is Darwin x86_64" in problem


def test_in_place_runs_this_interpreter_with_the_lock_to_compare(tmp_path: Path) -> None:
    seen: dict[str, object] = {}

    def record(args: Sequence[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
        seen["args"], seen["env"] = list(args), kwargs["env"]
        return subprocess.CompletedProcess(args, 0, "", "")

    lockdir = tmp_path / "locks"
    lockdir.mkdir()
    (lockdir / "cpu.txt").write_text("torch==2.14.1\n")
    stale = tmp_path / "reports" / "cpu-in-place" / "parity.md"
    stale.parent.mkdir(parents=True)
    stale.write_text("the last run's table\n")
    python = str(tmp_path / "venv" / "bin" / "python")
    given = {"PATH": "/usr/bin", "TORCHYARD_TRUST": "trusted"}
    status = run_in_place(
        PLAN.entry("cpu"), lockdir, tmp_path / "reports", ["-q"], runner=record, env=given, python=python
    )
    assert not stale.exists()  # a run starts from an empty reports folder
    args, env = seen["args"], seen["env"]
    assert status == 0 and isinstance(args, list) and isinstance(env, dict)
    assert args[:3] == [python, "-m", "torchyard.inimage"] and args[3].endswith("torchyard/inimage/suites")
    assert args[4].endswith("torchyard/inimage/selftests")
    # the interpreter's own tools first, as an activated venv has them (ExecuTorch 1.2 runs `flatc` from PATH)
    assert env["PATH"] == f"{tmp_path / 'venv' / 'bin'}{os.pathsep}/usr/bin"
    assert env["TORCHYARD_UNLOCKED"] == str((lockdir / "cpu.txt").resolve())
    assert "PYTEST_DISABLE_PLUGIN_AUTOLOAD" not in env  # the caller passed -q: plugins may be theirs
    assert env["TORCHYARD_REPORT_DIR"] == str((tmp_path / "reports" / "cpu-in-place").resolve())
    # the entry's cache outside the reports (which every run empties): a second run is warm, as with --local
    assert env["TORCHYARD_INDUCTOR_CACHE"] == str((Path(".torchyard") / "cache" / "cpu").absolute())


def test_in_place_in_an_interpreter_without_the_stack_is_one_line(tmp_path: Path) -> None:
    entry = PLAN.entry("cpu")
    with pytest.raises(UsageError, match=r"has no torchyard_no_such_module: install the entry's requirements"):
        require_stack(entry, tmp_path, sys.executable, required=("pytest", "torchyard_no_such_module"))
    require_stack(entry, tmp_path, sys.executable, required=("pytest",))  # present: nothing to say
    require_stack(entry, tmp_path, "/elsewhere/python", required=("torchyard_no_such_module",))  # not ours


class SyncRunner:
    """Records each `uv pip sync` and answers the offline ones with `offline_status`."""

    def __init__(self, offline_status: int = 0) -> None:
        self.offline_status = offline_status
        self.calls: list[Sequence[str]] = []

    def __call__(self, args: Sequence[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
        self.calls.append(args)
        status = self.offline_status if "--offline" in args else 0
        return subprocess.CompletedProcess(list(args), status, "", "")


def sync(venv: Path, lockfile: Path, runner: SyncRunner) -> list[tuple[bool, bool]]:
    """(offline, compiles) of each sync `sync_venv` runs."""
    runner.calls.clear()
    sync_venv(venv, lockfile, [], find_links=[], index_strategy="first-index", runner=runner, env={})
    return [("--offline" in call, "--compile-bytecode" in call) for call in runner.calls]


def test_a_lock_is_synced_online_and_compiled_once_then_checked_offline(tmp_path: Path) -> None:
    lockfile, venv = tmp_path / "cpu.txt", tmp_path / "venv"
    lockfile.write_text("torch==2.14.1 --hash=sha256:aa\n")
    venv.mkdir()
    runner = SyncRunner()
    assert sync(venv, lockfile, runner) == [(False, True)]  # a new venv: online, and its bytecode compiled
    assert sync(venv, lockfile, runner) == [(True, False)]  # the same lock again: offline, nothing compiled
    lockfile.write_text("torch==2.14.2 --hash=sha256:bb\n")
    assert sync(venv, lockfile, runner) == [(False, True)]  # a new lock: online, compiled
    drifted = SyncRunner(offline_status=2)  # the venv was edited by hand, and uv's cache lacks the wheel
    assert sync(venv, lockfile, drifted) == [(True, False), (False, False)]
    assert sync(venv, lockfile, runner) == [(True, False)]


def test_a_sync_stamp_planted_as_a_link_is_neither_trusted_nor_written_through(tmp_path: Path) -> None:
    lockfile, venv = tmp_path / "cpu.txt", tmp_path / "venv"
    lockfile.write_text("torch==2.14.1 --hash=sha256:aa\n")
    venv.mkdir()
    runner = SyncRunner()
    assert sync(venv, lockfile, runner) == [(False, True)]
    stamp = venv / ".torchyard-synced"
    saying_synced, precious = tmp_path / "saying-synced", tmp_path / "precious"
    saying_synced.write_text(stamp.read_text())
    precious.write_text("precious\n")
    for target in (saying_synced, precious):
        stamp.unlink()
        stamp.symlink_to(target)
        assert sync(venv, lockfile, runner) == [(False, True)]  # not trusted: online, compiled
        assert not stamp.is_symlink()  # replaced, not followed
    assert precious.read_text() == "precious\n"


def test_torchyards_own_variables_come_after_every_flag_that_could_set_them() -> None:
    """docker keeps the last --env of a name: matrix.toml's flags come before torchyard's own."""
    entry = PLAN.entry("cpu")
    entry = dataclasses.replace(entry, accelerator=dataclasses.replace(entry.accelerator, docker_run=("--env", "X=1")))
    args = docker_run_args(entry, run_plan("cpu", "untrusted"), HOST, {}, [])
    assert args.index("X=1") < args.index("TORCHYARD_TRUST=untrusted")


@pytest.mark.parametrize("name", ["rocm", "xpu", "cuda", "cpu"])
def test_no_accelerator_opens_the_seal(name: str) -> None:
    """The only capabilities are the warden's own, which it gives no command (`test_warden.py`)."""
    args = docker_run_args(PLAN.entry(name), run_plan(name, "untrusted"), HOST, {}, [])
    options = docker_run_options(PLAN.entry(name), run_plan(name, "untrusted"), HOST, {}, [])
    assert args[: args.index(run_plan(name).image)] == ("run", *options, *warden_options())
    assert loosening(options) == [] and "--user" not in options


@pytest.mark.parametrize("name", ["rocm", "xpu", "cuda", "cpu"])
def test_every_accelerators_options_pass_the_seal_check_and_a_stray_word_does_not(name: str) -> None:
    """The check reads the options as docker does: a word no flag takes would be the image, the rest its
    arguments; torchyard's own options never hold one, and options that end early are refused whoever made them."""
    options = docker_run_options(PLAN.entry(name), run_plan(name, "untrusted"), HOST, {}, [])
    check_untrusted_seal(options, trusted=False)
    for cut in (("--label",), ("--label", "x=1", "attacker/img:1")):
        with pytest.raises(ConfigError, match="would be taken for the image"):
            check_untrusted_seal((*cut, *options), trusted=True)


def test_a_venv_has_torchyards_in_image_side_on_its_path_and_a_source_folder_after_it(tmp_path: Path) -> None:
    """`--local` as the image: a source folder's modules import from any folder, not only from the checkout."""
    site = tmp_path / "venv" / "lib" / "python3.11" / "site-packages"
    site.mkdir(parents=True)
    inimage = stage_inimage(tmp_path / "venv", "3.11")
    assert (site / "torchyard.pth").read_text() == f"{inimage.resolve()}\n"
    assert (inimage / "torchyard" / "inimage" / "plugin" / "__init__.py").is_file()
    stage_inimage(tmp_path / "venv", "3.11", tmp_path / "nanoGPT")
    assert (site / "torchyard.pth").read_text().splitlines() == [str(inimage.resolve()), str(tmp_path / "nanoGPT")]
