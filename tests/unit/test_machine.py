from __future__ import annotations

from pathlib import Path

import pytest

from torchyard.errors import ConfigError
from torchyard.matrix import Index
from torchyard.matrix.machine import Limits, Machine, Registry, Source, load_machine, sources_for

INDEXES = (Index("pypi", "https://pypi.org/simple"), Index("nvidia", "https://pypi.nvidia.com"))


def test_no_mirrors_means_the_matrix_urls(tmp_path: Path) -> None:
    mirrors = load_machine({"HOME": str(tmp_path)}).mirrors
    assert mirrors == {}
    assert sources_for(INDEXES, mirrors) == (
        Source("pypi", "index", "https://pypi.org/simple"),
        Source("nvidia", "index", "https://pypi.nvidia.com"),
    )


def test_env_remaps_to_an_index_or_a_wheel_folder(tmp_path: Path) -> None:
    env = {"HOME": str(tmp_path), "TORCHYARD_MIRRORS": "pypi=file:///srv/pypi/simple/  nvidia=/srv/wheels"}
    assert sources_for(INDEXES, load_machine(env).mirrors) == (
        Source("pypi", "index", "file:///srv/pypi/simple"),
        Source("nvidia", "find-links", "/srv/wheels"),
    )


def test_file_then_env_wins(tmp_path: Path) -> None:
    config = tmp_path / ".config" / "torchyard" / "machine.toml"
    config.parent.mkdir(parents=True)
    config.write_text('[mirrors]\npypi = "https://mirror.internal/simple"\nnvidia = "/opt/nv"\n')
    mirrors = load_machine({"HOME": str(tmp_path), "TORCHYARD_MIRRORS": "nvidia=https://nv.internal/simple"}).mirrors
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
        load_machine({"HOME": str(tmp_path), **env})
    assert str(caught.value) == message


def test_bad_mirror_file(tmp_path: Path) -> None:
    path = tmp_path / "m.toml"
    path.write_text("[mirror]\npypi = 1\n")
    with pytest.raises(ConfigError, match=r"m.toml: mirror: unknown key; expected only \[mirrors\], \[base-images\]"):
        load_machine({"TORCHYARD_MACHINE_FILE": str(path)})


def test_base_image_overrides(tmp_path: Path) -> None:
    path = tmp_path / "m.toml"
    path.write_text('[base-images]\ncpu = "torchyard/base:bookworm"\nrocm = "registry.internal/rocm:7"\n')
    env = {"TORCHYARD_MACHINE_FILE": str(path), "TORCHYARD_BASE_IMAGES": "rocm=mirror.internal/rocm:7"}
    assert load_machine(env).base_overrides == {"cpu": "torchyard/base:bookworm", "rocm": "mirror.internal/rocm:7"}
    digest = "127.0.0.1:5000/team/base@sha256:" + "a" * 64
    assert load_machine({"TORCHYARD_BASE_IMAGES": f"cpu={digest}"}).base_overrides == {"cpu": digest}


def test_a_base_image_override_that_is_no_image_is_one_line(tmp_path: Path) -> None:
    commas = {"TORCHYARD_BASE_IMAGES": "cpu=torchyard/base:bookworm,cpu-new=torchyard/base:trixie"}
    with pytest.raises(ConfigError) as raised:
        load_machine(commas)
    assert str(raised.value) == (
        "TORCHYARD_BASE_IMAGES: cpu: not an image reference: 'torchyard/base:bookworm,cpu-new=torchyard/base:trixie'"
        " (pairs are separated by spaces)"
    )
    path = tmp_path / "m.toml"
    path.write_text('[base-images]\ncpu = "Base Image"\n')
    with pytest.raises(ConfigError, match=r"m.toml: base-images: cpu: not an image reference: 'Base Image'"):
        load_machine({"TORCHYARD_MACHINE_FILE": str(path)})


def test_limits_and_allowed_flags_come_from_the_machine_file(tmp_path: Path) -> None:
    path = tmp_path / "machine.toml"
    env = {"TORCHYARD_MACHINE_FILE": str(path)}
    settings = load_machine(env)
    assert settings.limits == Limits(None, 4096, "4g", "1g", "512m", "32g", "6h")
    assert settings.allowed_docker_run == frozenset() and not settings.allows_network
    assert settings == Machine()  # nothing set: the machine that sets nothing
    path.write_text(
        '[limits]\nmemory = "16g"\npids = 2048\ntmp = "8g"\ntimeout = "90m"\n'
        '[allow]\ndocker-run = ["--privileged"]\nnetwork = true\n'
    )
    settings = load_machine(env)
    assert settings.limits == Limits("16g", 2048, tmp="8g", timeout="90m")
    assert settings.allowed_docker_run == frozenset({"--privileged"}) and settings.allows_network


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
        load_machine(env)
    assert str(caught.value) == f"{path}: {message}"


def _registry(env: dict[str, str]) -> Registry | None:
    return load_machine(env).registry


def test_no_registry_unless_the_machine_names_one(tmp_path: Path) -> None:
    env = {"TORCHYARD_MACHINE_FILE": str(tmp_path / "machine.toml")}
    assert _registry(env) is None
    (tmp_path / "machine.toml").write_text('[registry]\nname = "ghcr.io/my-org"\n')
    assert _registry(env) == Registry("ghcr.io/my-org")
    assert _registry({**env, "TORCHYARD_REGISTRY": "127.0.0.1:5000/team"}) == Registry("127.0.0.1:5000/team")


def test_credentials_come_from_the_environment_in_pairs(tmp_path: Path) -> None:
    env = {"TORCHYARD_MACHINE_FILE": str(tmp_path / "none.toml"), "TORCHYARD_REGISTRY": "reg.example:443/ci"}
    registry = _registry({**env, "TORCHYARD_REGISTRY_USERNAME": "ci", "TORCHYARD_REGISTRY_PASSWORD": "s3cret-pw"})
    assert registry == Registry("reg.example:443/ci", {"username": "ci", "password": "s3cret-pw"})
    assert registry.host == "reg.example:443"
    assert registry.ref("torchyard/cpu:0123") == "reg.example:443/ci/torchyard/cpu:0123"
    with pytest.raises(ConfigError, match=r"^TORCHYARD_REGISTRY_PASSWORD is not set"):
        _registry({**env, "TORCHYARD_REGISTRY_USERNAME": "ci"})


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        ("https://ghcr.io/org", "'https://ghcr.io/org'"),
        ("ci:s3cret-pw@reg.example/ci", "a value with credentials (not shown)"),
        ("GHCR.io/Org", "'GHCR.io/Org'"),
        ("reg.example/ci:latest", "'reg.example/ci:latest'"),
    ],
)
def test_a_bad_registry_name_is_one_line_without_its_secret(tmp_path: Path, value: str, shown: str) -> None:
    env = {"TORCHYARD_MACHINE_FILE": str(tmp_path / "none.toml"), "TORCHYARD_REGISTRY": value}
    with pytest.raises(ConfigError) as caught:
        _registry(env)
    assert str(caught.value).startswith(f"TORCHYARD_REGISTRY: expected host[:port]/path such as ghcr.io/my-org or "
                                        f"127.0.0.1:5000/team, got {shown} (no scheme")  # fmt: skip
    assert "s3cret" not in str(caught.value)


def test_a_bad_registry_table_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "machine.toml"
    path.write_text('[registry]\nurl = "ghcr.io/org"\n')
    with pytest.raises(ConfigError, match=r'machine.toml: registry: expected name = "host\[:port\]/path" only$'):
        _registry({"TORCHYARD_MACHINE_FILE": str(path)})
