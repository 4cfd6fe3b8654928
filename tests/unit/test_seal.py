"""One seal for every container torchyard starts: the wheel's fetch and build, the cache seed and the
built image's check carry the same user rule, capabilities, read-only root, limits and deadline; matrix.toml
may tighten it, never loosen it."""

from __future__ import annotations

import dataclasses
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from torchyard.errors import CommandError, ConfigError
from torchyard.image.check import image_check_args
from torchyard.image.wheel import build_helper, fetch_helper
from torchyard.matrix import load_plan
from torchyard.matrix.machine import Limits
from torchyard.run.scopes import CacheScope, seed_args
from torchyard.seal import (
    Helper,
    Seal,
    check_matrix_flags,
    check_untrusted_seal,
    helper_args,
    loosening,
    run_sealed,
    run_user,
    sealed_run,
    warden_options,
)


def _fetch_args(image: str, **kwargs: Any) -> tuple[str, ...]:
    return sealed_run(fetch_helper(image, **kwargs))


def _build_args(image: str, **kwargs: Any) -> tuple[str, ...]:
    return sealed_run(build_helper(image, **kwargs))


PLAN = load_plan(Path(__file__).parents[2] / "matrix.toml")

USER = "1001:1001"
SCRATCH = Path("/scratch")
HELPERS = {
    "fetch": _fetch_args(
        "img", name="n", user=USER, buildenv=SCRATCH / "e", index_file=SCRATCH / "i", ca_bundle=None,
        host_network=False, requires=("hatchling",),
    ),
    "build": _build_args("img", name="n", user=USER, source=SCRATCH / "s", buildenv=SCRATCH / "e", out=SCRATCH / "o"),
    "seed": seed_args(CacheScope("own", "trusted", "p", "untrusted"), "trusted", image="img", user=USER, name="n"),
    "image check": image_check_args("img", name="n", user=USER, checks=("gcc",)),
}  # fmt: skip


def _contains(args: tuple[str, ...], part: tuple[str, ...]) -> bool:
    return any(args[index : index + len(part)] == part for index in range(len(args)))


@pytest.mark.parametrize("helper", sorted(HELPERS))
def test_every_helper_container_is_sealed_limited_and_bounded_in_time(helper: str) -> None:
    args = HELPERS[helper]
    sealed = helper_args(USER, network=helper == "fetch", warden=helper != "seed")
    assert _contains(args, sealed)
    for flag in ("--cap-drop", "--read-only", "--pids-limit", "--memory", "--memory-swap"):
        assert flag in sealed
    assert _contains(sealed, ("--security-opt", "no-new-privileges"))
    bound = args[args.index("--entrypoint") + 1 :]
    if helper == "seed":  # a copy in the entry's base, which has no warden: the base's timeout, by its path
        assert bound[:4] == ("/usr/bin/timeout", "img", "--signal=KILL", "1800") and bound[4].startswith("/")
        assert _contains(args, ("--user", USER)) and "--cap-add" not in args
    else:  # the image's warden, PID 1, which a build backend can neither stop, trace nor starve, ends it at
        # HELPER_SECONDS; it starts as root with four capabilities and runs the backend as USER, with none
        assert bound[:6] == ("/opt/torchyard/warden", "img", "1800", "0", USER, "--") and bound[6].startswith("/")
        assert args[4:15] == warden_options() == (
            "--user", "0:0", "--cap-add", "KILL", "--cap-add", "SETUID", "--cap-add", "SETGID",
        "--cap-add", "SETPCAP", "--no-healthcheck",
        )  # fmt: skip
    assert _contains(args, ("--network", "none")) == (helper != "fetch")
    assert _contains(sealed, ("--log-driver", "json-file")) and _contains(sealed, ("--log-opt", "max-file=1"))


def test_a_helper_never_runs_as_root_and_only_the_fetch_has_a_network() -> None:
    assert run_user(0, 0) == "1000:1000"
    assert "none" not in helper_args(USER, network=True)
    assert helper_args(USER)[helper_args(USER).index("--network") + 1] == "none"


def test_root_runs_as_the_image_user() -> None:
    assert run_user(0, 0) == "1000:1000"
    assert run_user(1001, 1002) == "1001:1002"


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (("--memory", "64g"), "docker-run[0]: --memory 64g is above this machine's 12g (machine.toml [limits])"),
        (("--memory-swap=-1",), "docker-run[0]: --memory-swap -1 is above this machine's 12g"),
        (("--pids-limit=-1",), "docker-run[0]: --pids-limit -1 is above this machine's 4096"),
        (("--shm-size", "1g", "--pids-limit", "100000"), "docker-run[2]: --pids-limit 100000 is above"),
        # 0 unsets docker's memory limit, and 0 of swap is twice the memory: neither lowers anything
        (("--memory", "0", "--memory-swap", "0"), "docker-run[0]: --memory 0 is above this machine's 12g"),
        (("--memory", "2g", "--memory-swap", "0k"), "docker-run[2]: --memory-swap 0k is above this machine's 12g"),
        (("--memory=0b",), "docker-run[0]: --memory 0b is above"),
    ],
)
def test_a_matrix_flag_may_lower_a_machine_limit_never_raise_it(flags: tuple[str, ...], message: str) -> None:
    entry = PLAN.entry("cpu")
    raised = dataclasses.replace(entry, accelerator=dataclasses.replace(entry.accelerator, docker_run=flags))
    with pytest.raises(ConfigError) as caught:
        check_matrix_flags(raised, Seal(Limits(), "12g"))
    assert str(caught.value).startswith(f"matrix.toml: accelerators > cpu > {message}")
    assert str(caught.value).endswith("matrix.toml may lower a limit, never raise it")
    lowered = ("--memory", "2g", "--pids-limit=512")
    check_matrix_flags(
        dataclasses.replace(entry, accelerator=dataclasses.replace(entry.accelerator, docker_run=lowered)),
        Seal(Limits(), "12g"),
    )


@pytest.mark.parametrize(
    "flags",
    [
        ("--ipc=host",), ("--ipc", "host"), ("--pid=host",), ("--network", "host"), ("--userns=host",),
        ("--security-opt", "seccomp=unconfined"), ("--security-opt=apparmor=unconfined",), ("--privileged",),
        ("--cap-add", "SYS_ADMIN"),
    ],
)  # fmt: skip
def test_an_untrusted_container_keeps_every_namespace_and_filter(flags: tuple[str, ...]) -> None:
    assert loosening(("--network", "none", *flags))
    with pytest.raises(ConfigError, match="an untrusted run's container keeps the seal"):
        check_untrusted_seal(("--cap-drop", "ALL", *flags), trusted=False)
    check_untrusted_seal(flags, trusted=True)


def test_a_stop_removes_the_helper_container_and_a_failure_leaves_it_to_docker_run_rm() -> None:
    calls: list[tuple[str, ...]] = []

    def runner(args: Sequence[str], **_: Any) -> subprocess.CompletedProcess[str]:
        calls.append(tuple(args))
        if args[1] == "run":
            raise stop
        return subprocess.CompletedProcess(args, 0, "", "")

    helper = Helper("n-build", USER, "img", ("/bin/true",))
    stop: BaseException = KeyboardInterrupt()
    with pytest.raises(KeyboardInterrupt):
        run_sealed(helper, docker_path="docker", runner=runner, env={})
    assert calls == [("docker", *sealed_run(helper)), ("docker", "rm", "--force", "n-build")]
    stop = CommandError("docker failed with exit status 1", 1, "")
    with pytest.raises(CommandError):
        run_sealed(helper, docker_path="docker", runner=runner, env={})
    assert len(calls) == 3  # a failed run's container is docker's own to remove (--rm)
