"""Issue 58, item 5: the lock paired ExecuTorch 1.5.1 with torch 2.13 and nothing checked the pair (ExecuTorch's
wheels declare no torch bound). torchyard's table of pairs, each row with its source, decides: a lock or an image
build of a known release beside another torch is refused in one line, and init names the release to pin."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from torchyard.commands.init import executorch_comment
from torchyard.errors import ImageBuildError
from torchyard.lock.pairs import mismatched_pair, pairs, torch_for
from torchyard.matrix import load_plan

REPO = Path(__file__).parents[2]
PLAN = load_plan(REPO / "matrix.toml")


def test_every_row_of_the_table_names_its_source() -> None:
    assert pairs()["1.5"][0] == "2.14" and pairs()["1.4"][0] == "2.13"
    assert all(source.strip() for _, source in pairs().values())


@pytest.mark.parametrize(
    ("pins", "refused"),
    [
        (["executorch==1.5.1", "torch==2.14.1+cpu"], False),
        (["executorch==1.5.1", "torch==2.13.0+cpu"], True),  # the speech repository's lock
        (["ExecuTorch==1.4.0", "torch==2.14.1"], True),  # names as a lock may spell them
        (["executorch==1.2.0", "torch==2.11.0"], False),
        (["executorch==1.0.1", "numpy==2.3.0"], False),  # a vendor base's torch: not in the lock to compare
        (["executorch==0.7.0", "torch==2.8.0"], False),  # a release the table does not know: no verdict
        (["torch==2.13.0"], False),
    ],
)
def test_a_lock_that_pairs_a_known_release_with_another_torch_is_refused(pins: list[str], refused: bool) -> None:
    why = mismatched_pair(pins)
    assert bool(why) == refused
    if refused:
        assert why.startswith("executorch ") and "is built for torch" in why and "source: " in why
        assert "\n" not in why


def test_an_image_build_of_a_mismatched_lock_stops_before_anything_is_built(tmp_path: Path) -> None:
    shutil.copytree(REPO / "lockfiles", tmp_path / "lockfiles")
    lock = tmp_path / "lockfiles" / "cpu.txt"
    lock.write_text(lock.read_text().replace("torch==2.14.1", "torch==2.13.0", 1))
    from torchyard.image.plan import plan_build

    with pytest.raises(ImageBuildError, match=r"executorch 1\.5\.1 is built for torch 2\.14\.\*"):
        plan_build(
            PLAN.entry("cpu"), tmp_path / "lockfiles", project="p", base_image="b", base_id="sha256:" + "1" * 64,
            uv_version="0.13.9", revision="r", source_date_epoch="1700000000",
        )  # fmt: skip


@pytest.mark.parametrize(
    ("torch", "release"),
    [('"torch"', "1.5"), ('"torch==2.13.*"', "1.4"), ('"torch>=2.1,<2.12"', "1.2"), ('"torch==1.13"', None)],
)
def test_init_names_the_release_built_for_the_torch_it_writes(torch: str, release: str | None) -> None:
    comment = executorch_comment(torch)
    assert all(line.startswith("# ") for line in comment.splitlines())
    if release is None:
        assert "knows none for this one" in comment
    else:
        assert f'"executorch=={release}.*" for torch {torch_for(release + ".0")}' in comment
        # and the torch to pin with it: an unbounded "torch" locks the newest, which no release may pair with yet
        assert f'"torch=={torch_for(release + ".0")}.*" in place of the torch above' in comment
    assert json.loads(torch)  # the template's value, quoted as matrix.toml writes it


@pytest.mark.parametrize(
    ("pins", "platform", "refused"),
    [
        # the detection repository's lock: torch from the CPU index, torchvision from PyPI (a CUDA build)
        (["torch==2.13.0+cpu", "torchvision==0.28.0"], "x86_64-manylinux_2_28", "torchvision 0.28.0 is PyPI's build"),
        (["torch==2.13.0+cpu", "torchaudio==2.13.0"], "linux", "torchaudio 2.13.0 is PyPI's build"),
        (["torch==2.13.0", "torchvision==0.28.0+cpu"], "x86_64-manylinux_2_28", "torchvision 0.28.0+cpu is the +cpu"),
        (["torch==2.13.0+rocm6.4", "torchvision==0.28.0+cpu"], "x86_64-manylinux_2_28", "is the +cpu build"),
        (["torch==2.13.0+cpu", "torchvision==0.28.0+cpu"], "x86_64-manylinux_2_28", ""),
        (["torch==2.14.1", "torchvision==0.29.2"], "x86_64-manylinux_2_28", ""),  # the zoo's: both PyPI's
        (["torch==2.13.0+cu130", "torchvision==0.28.0+cu132"], "x86_64-manylinux_2_28", ""),  # one CUDA major
        (["torch==2.13.0+cu130", "torchvision==0.28.0"], "x86_64-manylinux_2_28", ""),  # PyPI's CUDA: not known
        (["torch==2.13.0+cpu", "torchvision==0.28.0"], "aarch64-apple-darwin", ""),  # PyPI's macOS builds: CPU
        (["torch==2.6.0a0+ecf3bae40a.nv25.01", "torchvision==0.21.0"], "x86_64-manylinux_2_28", ""),  # a vendor's
        (["torchvision==0.28.0"], "x86_64-manylinux_2_28", ""),  # a vendor base's torch: not in the lock
    ],
)
def test_a_companion_locked_for_another_torch_build_is_refused_at_lock_time(
    pins: list[str], platform: str, refused: str
) -> None:
    """Issue 71, item 6: a CPU torch beside PyPI's CUDA torchvision passed the lock and was refused only by the
    image check, 2 min 41 s into the build. The lock reads the same rule (`contract.build_family`)."""
    why = mismatched_pair(pins, platform)
    assert (refused in why and "\n" not in why) if refused else why == "", why
    if refused:
        assert "from the index torch comes from" in why


def test_an_image_build_of_a_lock_with_a_companion_of_another_build_stops_before_anything_is_built(
    tmp_path: Path,
) -> None:
    shutil.copytree(REPO / "lockfiles", tmp_path / "lockfiles")
    lock = tmp_path / "lockfiles" / "cpu.txt"
    lock.write_text(lock.read_text().replace("torch==2.14.1", "torch==2.14.1+cpu", 1) + "torchvision==0.29.2\n")
    from torchyard.image.plan import plan_build

    with pytest.raises(ImageBuildError, match=r"torchvision 0\.29\.2 is PyPI's build"):
        plan_build(
            PLAN.entry("cpu"), tmp_path / "lockfiles", project="p", base_image="b", base_id="sha256:" + "1" * 64,
            uv_version="0.13.9", revision="r", source_date_epoch="1700000000",
        )  # fmt: skip
