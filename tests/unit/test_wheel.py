"""The project's wheel is built in sealed containers: the argument lists, the build requirements, and
what is taken back from the output folder."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from torchyard.errors import ImageBuildError
from torchyard.image.source import ProjectFile
from torchyard.image.wheel import build_helper, build_requirements, fetch_helper, take_wheels
from torchyard.seal import sealed_run


def _fetch_args(image: str, **kwargs: Any) -> tuple[str, ...]:
    return sealed_run(fetch_helper(image, **kwargs))


def _build_args(image: str, **kwargs: Any) -> tuple[str, ...]:
    return sealed_run(build_helper(image, **kwargs))


def test_the_backend_runs_sealed_with_nothing_but_the_source_and_one_output_folder(tmp_path: Path) -> None:
    args = _build_args("sha256:abc", name="n", user="1000:1000", source=tmp_path / "s", buildenv=tmp_path / "e",
                      out=tmp_path / "o")  # fmt: skip
    assert args[:6] == ("run", "--rm", "--name", "n-build", "--user", "0:0")  # the warden's, which drops to:
    assert args[args.index("/opt/torchyard/warden") + 4] == "1000:1000"
    assert args[15:17] == ("--network", "none") and "--cap-drop" in args and "--read-only" in args
    mounts = [args[i + 1] for i, arg in enumerate(args) if arg == "--mount"]
    assert mounts == [
        f"type=bind,source={tmp_path / 's'},target=/src,readonly",
        f"type=bind,source={tmp_path / 'e'},target=/opt/torchyard-build,readonly",
        f"type=bind,source={tmp_path / 'o'},target=/out",
    ]
    assert "--env" in args and not any("PASSWORD" in arg or "index-args" in arg for arg in args)
    assert "--offline" in args[-1] and "--no-build-isolation" in args[-1]


def test_the_requirements_are_fetched_without_the_source_as_wheels_only(tmp_path: Path) -> None:
    args = _fetch_args(
        "sha256:abc", name="n", user="1000:1000", buildenv=tmp_path / "e", index_file=tmp_path / "i",
        ca_bundle=None, host_network=True, requires=("hatchling>=1.20",),
    )  # fmt: skip
    assert args[args.index("--network") : args.index("--network") + 2] == ("--network", "host")
    assert not any("target=/src" in arg for arg in args)
    assert f"type=bind,source={tmp_path / 'i'},target=/run/torchyard/index-args,readonly" in args
    assert "--only-binary :all:" in args[-3] and args[-2:] == ("fetch", "hatchling>=1.20")


def pyproject(text: str) -> list[ProjectFile]:
    return [ProjectFile("pyproject.toml", "file", text.encode())]


def test_build_requirements_are_read_without_running_anything() -> None:
    assert build_requirements([]) == ("setuptools>=40.8.0",)  # PEP 517's default
    assert build_requirements(pyproject('[build-system]\nrequires = ["hatchling"]\nbuild-backend = "x"\n')) == (
        "hatchling",
    )
    with pytest.raises(ImageBuildError, match="requires is not a list of strings"):
        build_requirements(pyproject("[build-system]\nrequires = 'hatchling'\n"))


def test_only_regular_wheels_are_taken_back(tmp_path: Path) -> None:
    out, target = tmp_path / "out", tmp_path / "target"
    out.mkdir()
    target.mkdir()
    (out / "robot_policy-0.1-py3-none-any.whl").write_bytes(b"PK")
    (out / "leak.whl").symlink_to("/etc/hostname")
    (out / "notes.txt").write_text("x")
    os.mkfifo(out / "fifo.whl")
    assert take_wheels(out, target) == [target / "robot_policy-0.1-py3-none-any.whl"]
    assert sorted(path.name for path in target.iterdir()) == ["robot_policy-0.1-py3-none-any.whl"]


@pytest.mark.parametrize(
    ("item", "why"),
    [
        ("--no-binary", "is an option, not a requirement; name a package (PEP 508)"),
        ("--find-links", "is an option, not a requirement; name a package (PEP 508)"),
        (" -e .", "is an option, not a requirement; name a package (PEP 508)"),
        ("evilb @ http://host/evilb-1.tar.gz", "names a URL; build requirements come from the entry's indexes only"),
        ("hatchling >>= 1", "is not a PEP 508 requirement"),
    ],
)
def test_a_build_requirement_uv_would_read_as_an_option_or_url_is_refused(item: str, why: str) -> None:
    text = f'[build-system]\nrequires = ["hatchling", {item!r}, "evilb"]\n'.replace("'", '"')
    with pytest.raises(ImageBuildError) as caught:
        build_requirements(pyproject(text))
    assert str(caught.value) == (f"the project's pyproject.toml: [build-system] requires item {item!r} {why}")


def test_the_requirements_reach_uv_after_the_end_of_its_options(tmp_path: Path) -> None:
    args = _fetch_args(
        "img", name="n", user="1000:1000", buildenv=tmp_path / "e", index_file=tmp_path / "i", ca_bundle=None,
        host_network=False, requires=("hatchling",),
    )  # fmt: skip
    script = args[args.index("-c") + 1]
    assert script.endswith('"${index[@]}" -- "$@"; fi')
