"""The cache seed (route 5 of issue 57): Docker fills an empty volume from the image at its mount point, read-only
or not, unless the mount says `volume-nocopy`; the seed mounts every volume so, and runs in the entry's base as
the trusted matrix.toml pins it, never the run's own image."""

from __future__ import annotations

from pathlib import Path

import pytest

from torchyard.matrix import load_plan
from torchyard.run.scopes import CacheScope, seed_args, seed_image
from torchyard.seal import Helper, sealed_run, uncopied_volumes

PLAN = load_plan(Path(__file__).parents[2] / "matrix.toml")
SCOPE = CacheScope("torchyard-cache-p-cpu-untrusted-1", "torchyard-cache-p-cpu", "p", "untrusted")


def test_the_seed_mounts_both_volumes_nocopy_and_runs_the_image_it_is_given() -> None:
    args = seed_args(SCOPE, "torchyard-cache-p-cpu", image="base@sha256:" + "0" * 64, user="1000:1000", name="n")
    mounts = [args[index + 1] for index, arg in enumerate(args) if arg == "--mount"]
    assert mounts == [
        "type=volume,source=torchyard-cache-p-cpu,target=/seed,readonly,volume-nocopy",
        "type=volume,source=torchyard-cache-p-cpu-untrusted-1,target=/cache/inductor,volume-nocopy",
    ]
    assert args[args.index("--entrypoint") + 2] == "base@sha256:" + "0" * 64


def test_a_seed_from_another_stack_copies_the_proofs_folder_alone() -> None:
    whole = seed_args(SCOPE, "torchyard-cache-p-cpu", image="base", user="1000:1000", name="n")
    proofs = seed_args(SCOPE, "torchyard-cache-p-cpu", image="base", user="1000:1000", name="n", folder="self-tests")
    assert whole[-3:] == ("-R", "/seed/.", "/cache/inductor/")
    assert proofs[-3:] == ("-R", "/seed/self-tests", "/cache/inductor/")


def test_the_seed_image_is_the_entrys_base_never_its_own_image() -> None:
    entry = PLAN.entry("cpu")
    assert seed_image(entry, {}) == str(entry.accelerator.require_base_image())
    assert seed_image(entry, {"cpu": "torchyard/base:bookworm"}) == "torchyard/base:bookworm"  # machine.toml's
    assert not seed_image(entry, {}).startswith("torchyard/")  # no image a build of the project tags


@pytest.mark.parametrize(
    "options",
    [
        ("--mount", "type=volume,source=v,target=/seed,readonly"),
        ("--mount=type=volume,source=v,target=/c",),
        ("-v", "v:/c"),
        ("--volume", "v:/c:ro"),
    ],
)
def test_a_helper_mounting_a_volume_that_docker_could_fill_is_refused(options: tuple[str, ...]) -> None:
    assert uncopied_volumes(options)
    with pytest.raises(ValueError, match="without volume-nocopy"):
        sealed_run(Helper("n", "1000:1000", "img", ("/bin/true",), options=options))


def test_binds_and_nocopy_volumes_pass() -> None:
    options = (
        "--mount",
        "type=bind,source=/s,target=/src,readonly",
        "--mount",
        "type=volume,source=v,target=/c,volume-nocopy",
    )
    assert uncopied_volumes(options) == []
