from __future__ import annotations

from pathlib import Path

import pytest

from torchyard.errors import ConfigError
from torchyard.matrix import Index
from torchyard.matrix.machine import (
    Limits,
    Source,
    allowed_docker_run,
    allows_network,
    load_base_overrides,
    load_limits,
    load_mirrors,
    sources_for,
)

INDEXES = (Index("pypi", "https://pypi.org/simple"), Index("nvidia", "https://pypi.nvidia.com"))


def test_no_mirrors_means_the_matrix_urls(tmp_path: Path) -> None:
    mirrors = load_mirrors({"HOME": str(tmp_path)})
    assert mirrors == {}
    assert sources_for(INDEXES, mirrors) == (
        Source("pypi", "index", "https://pypi.org/simple"),
        Source("nvidia", "index", "https://pypi.nvidia.com"),
    )


def test_env_remaps_to_an_index_or_a_wheel_folder(tmp_path: Path) -> None:
    env = {"HOME": str(tmp_path), "TORCHYARD_MIRRORS": "pypi=file:///srv/pypi/simple/  nvidia=/srv/wheels"}
    assert sources_for(INDEXES, load_mirrors(env)) == (
        Source("pypi", "index", "file:///srv/pypi/simple"),
        Source("nvidia", "find-links", "/srv/wheels"),
    )


def test_file_then_env_wins(tmp_path: Path) -> None:
    config = tmp_path / ".config" / "torchyard" / "machine.toml"
    config.parent.mkdir(parents=True)
    config.write_text('[mirrors]\npypi = "https://mirror.internal/simple"\nnvidia = "/opt/nv"\n')
    mirrors = load_mirrors({"HOME": str(tmp_path), "TORCHYARD_MIRRORS": "nvidia=https://nv.internal/simple"})
    assert mirrors == {
        "pypi": Source("pypi", "index", "https://mirror.internal/simple"),
        "nvidia": Source("nvidia", "index", "https://nv.internal/simple"),
    }


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"TORCHYARD_MIRRORS": "pypi"}, "TORCHYARD_MIRRORS: expected NAME=URL-or-folder pairs, got 'pypi'"),
        (
            {"TORCHYARD_MIRRORS": "pypi=relative/dir"},
            "TORCHYARD_MIRRORS: mirror 'pypi': expected a URL or an absolute folder path, got 'relative/dir'",
        ),
    ],
)
def test_bad_mirror_settings(tmp_path: Path, env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_mirrors({"HOME": str(tmp_path), **env})
    assert str(caught.value) == message


def test_bad_mirror_file(tmp_path: Path) -> None:
    path = tmp_path / "m.toml"
    path.write_text("[mirror]\npypi = 1\n")
    with pytest.raises(ConfigError, match=r"m.toml: mirror: unknown key; expected only \[mirrors\], \[base-images\]"):
        load_mirrors({"TORCHYARD_MACHINE_FILE": str(path)})


def test_base_image_overrides(tmp_path: Path) -> None:
    path = tmp_path / "m.toml"
    path.write_text('[base-images]\ncpu = "torchyard/base:bookworm"\nrocm = "registry.internal/rocm:7"\n')
    env = {"TORCHYARD_MACHINE_FILE": str(path), "TORCHYARD_BASE_IMAGES": "rocm=mirror.internal/rocm:7"}
    assert load_base_overrides(env) == {"cpu": "torchyard/base:bookworm", "rocm": "mirror.internal/rocm:7"}
    digest = "127.0.0.1:5000/team/base@sha256:" + "a" * 64
    assert load_base_overrides({"TORCHYARD_BASE_IMAGES": f"cpu={digest}"}) == {"cpu": digest}


def test_a_base_image_override_that_is_no_image_is_one_line(tmp_path: Path) -> None:
    commas = {"TORCHYARD_BASE_IMAGES": "cpu=torchyard/base:bookworm,cpu-new=torchyard/base:trixie"}
    with pytest.raises(ConfigError) as raised:
        load_base_overrides(commas)
    assert str(raised.value) == (
        "TORCHYARD_BASE_IMAGES: cpu: not an image reference: 'torchyard/base:bookworm,cpu-new=torchyard/base:trixie'"
        " (pairs are separated by spaces)"
    )
    path = tmp_path / "m.toml"
    path.write_text('[base-images]\ncpu = "Base Image"\n')
    with pytest.raises(ConfigError, match=r"m.toml: base-images: cpu: not an image reference: 'Base Image'"):
        load_base_overrides({"TORCHYARD_MACHINE_FILE": str(path)})


def test_limits_and_allowed_flags_come_from_the_machine_file(tmp_path: Path) -> None:
    path = tmp_path / "machine.toml"
    env = {"TORCHYARD_MACHINE_FILE": str(path)}
    assert (
        load_limits(env) == Limits(None, 4096, "4g", "1g", "512m", "32g", "6h")
        and allowed_docker_run(env) == frozenset()
    )
    assert not allows_network(env)
    path.write_text(
        '[limits]\nmemory = "16g"\npids = 2048\ntmp = "8g"\ntimeout = "90m"\n'
        '[allow]\ndocker-run = ["--privileged"]\nnetwork = true\n'
    )
    assert load_limits(env) == Limits("16g", 2048, tmp="8g", timeout="90m")
    assert allowed_docker_run(env) == frozenset({"--privileged"}) and allows_network(env)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[limits]\nmemory = "lots"\n', "limits > memory: expected a size such as \"16g\", got 'lots'"),
        ("[limits]\npids = 3\n", "limits > pids: expected a whole number of at least 64, got 3"),
        (
            '[allow]\ndocker-run = "--privileged"\n',
            'allow: expected docker-run = ["--flag", ...] and network = true only',
        ),
        (
            '[limits]\ntimeout = "forever"\n',
            'limits > timeout: expected a duration such as "6h", "90m" or "600s", got \'forever\'',
        ),
        ("[limits]\ntmp = 4\n", 'limits > tmp: expected a size such as "16g", got 4'),
        ("[allow]\na = " + "[" * 5000 + "]" * 5000 + "\n", "cannot read: nested too deeply"),
    ],
)
def test_bad_machine_settings_are_one_line(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "machine.toml"
    path.write_text(text)
    env = {"TORCHYARD_MACHINE_FILE": str(path)}
    with pytest.raises(ConfigError) as caught:
        load_limits(env)
        allowed_docker_run(env)
    assert str(caught.value) == f"{path}: {message}"
