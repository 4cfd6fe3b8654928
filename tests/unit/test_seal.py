"""One seal for every container torchyard starts: the wheel's fetch and build, the cache seed and the
built image's check carry the same user rule, capabilities, read-only root, limits and deadline."""

from __future__ import annotations

from pathlib import Path

import pytest

from torchyard.image.check import image_check_args
from torchyard.image.wheel import build_args, fetch_args
from torchyard.run.scopes import CacheScope, seed_args
from torchyard.seal import helper_args, run_user

USER = "1001:1001"
SCRATCH = Path("/scratch")
HELPERS = {
    "fetch": fetch_args(
        "img", name="n", user=USER, buildenv=SCRATCH / "e", index_file=SCRATCH / "i", ca_bundle=None,
        host_network=False, requires=("hatchling",),
    ),
    "build": build_args("img", name="n", user=USER, source=SCRATCH / "s", buildenv=SCRATCH / "e", out=SCRATCH / "o"),
    "seed": seed_args(CacheScope("own", "trusted", "p", "untrusted"), image="img", user=USER, name="n"),
    "image check": image_check_args("img", name="n", user=USER, checks=("gcc",)),
}  # fmt: skip


def _contains(args: tuple[str, ...], part: tuple[str, ...]) -> bool:
    return any(args[index : index + len(part)] == part for index in range(len(args)))


@pytest.mark.parametrize("helper", sorted(HELPERS))
def test_every_helper_container_is_sealed_limited_and_bounded_in_time(helper: str) -> None:
    args = HELPERS[helper]
    sealed = helper_args(USER, network=helper == "fetch")
    assert _contains(args, sealed)
    for flag in ("--cap-drop", "--read-only", "--pids-limit", "--memory", "--memory-swap"):
        assert flag in sealed
    assert _contains(sealed, ("--security-opt", "no-new-privileges"))
    assert args[args.index("--entrypoint") + 1] == "/usr/bin/timeout" and "--signal=KILL" in args
    assert _contains(args, ("--network", "none")) == (helper != "fetch")
    # the command, like the deadline, is named by its path: the image's PATH starts with the project's scripts
    assert args[args.index("--signal=KILL") + 2].startswith("/")
    assert _contains(sealed, ("--log-driver", "json-file")) and _contains(sealed, ("--log-opt", "max-file=1"))


def test_a_helper_never_runs_as_root_and_only_the_fetch_has_a_network() -> None:
    assert run_user(0, 0) == "1000:1000"
    assert "none" not in helper_args(USER, network=True)
    assert helper_args(USER)[helper_args(USER).index("--network") + 1] == "none"
