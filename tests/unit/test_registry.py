"""The registry a machine shares: its name, credentials from the environment, and the build client's
private config (the engine-facing parts are tested against a real registry in tests/integration)."""

from __future__ import annotations

import base64
import json
import stat
from pathlib import Path

import pytest

from torchyard.errors import ConfigError
from torchyard.image.registry import Registry, client_environment, load_registry, pull, registry_host


def test_no_registry_unless_the_machine_names_one(tmp_path: Path) -> None:
    env = {"TORCHYARD_MACHINE_FILE": str(tmp_path / "machine.toml")}
    assert load_registry(env) is None
    (tmp_path / "machine.toml").write_text('[registry]\nname = "ghcr.io/my-org"\n')
    assert load_registry(env) == Registry("ghcr.io/my-org")
    assert load_registry({**env, "TORCHYARD_REGISTRY": "127.0.0.1:5000/team"}) == Registry("127.0.0.1:5000/team")


def test_credentials_come_from_the_environment_in_pairs(tmp_path: Path) -> None:
    env = {"TORCHYARD_MACHINE_FILE": str(tmp_path / "none.toml"), "TORCHYARD_REGISTRY": "reg.example:443/ci"}
    registry = load_registry({**env, "TORCHYARD_REGISTRY_USERNAME": "ci", "TORCHYARD_REGISTRY_PASSWORD": "s3cret-pw"})
    assert registry == Registry("reg.example:443/ci", {"username": "ci", "password": "s3cret-pw"})
    assert registry.host == "reg.example:443"
    assert registry.ref("torchyard/cpu:0123") == "reg.example:443/ci/torchyard/cpu:0123"
    with pytest.raises(ConfigError, match=r"^TORCHYARD_REGISTRY_PASSWORD is not set"):
        load_registry({**env, "TORCHYARD_REGISTRY_USERNAME": "ci"})


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
        load_registry(env)
    assert str(caught.value).startswith(f"TORCHYARD_REGISTRY: expected host[:port]/path such as ghcr.io/my-org or "
                                        f"127.0.0.1:5000/team, got {shown} (no scheme")  # fmt: skip
    assert "s3cret" not in str(caught.value)


def test_a_bad_registry_table_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "machine.toml"
    path.write_text('[registry]\nurl = "ghcr.io/org"\n')
    with pytest.raises(ConfigError, match=r'machine.toml: registry: expected name = "host\[:port\]/path" only$'):
        load_registry({"TORCHYARD_MACHINE_FILE": str(path)})


@pytest.mark.parametrize(
    ("reference", "host"),
    [
        ("docker.io/library/debian:12@sha256:" + "0" * 64, "docker.io"),
        ("debian:12", "docker.io"),
        ("rocm/pytorch:latest", "docker.io"),
        ("127.0.0.1:5000/torchyard/base@sha256:" + "0" * 64, "127.0.0.1:5000"),
        ("localhost/base:1", "localhost"),
        ("ghcr.io/org/img:1", "ghcr.io"),
    ],
)
def test_registry_host_of_a_reference(reference: str, host: str) -> None:
    assert registry_host(reference) == host


def test_the_build_client_gets_a_private_config_only_with_environment_credentials() -> None:
    with client_environment(Registry("reg.example/ci"), {"PATH": "/bin"}) as env:
        assert env == {"PATH": "/bin"}  # Docker's own credential store
    registry = Registry("reg.example:5000/ci", {"username": "ci", "password": "s3cret-pw"})
    with client_environment(registry, {"PATH": "/bin"}) as env:
        config = Path(env["DOCKER_CONFIG"]) / "config.json"
        assert stat.S_IMODE(config.stat().st_mode) == 0o600
        auth = json.loads(config.read_text())["auths"]["reg.example:5000"]["auth"]
        assert base64.b64decode(auth).decode() == "ci:s3cret-pw"
    assert not config.exists() and not config.parent.exists()


class _Unreachable:
    """An engine whose registry answers every pull with an error (a stand-in for docker.APIClient)."""

    def __init__(self, events: list[dict[str, str]]) -> None:
        self.events = events

    def pull(self, *args: object, **kwargs: object) -> list[dict[str, str]]:
        return self.events


@pytest.mark.parametrize(
    ("event", "said"),
    [
        ({"error": "manifest unknown: manifest unknown"}, ""),
        ({"error": "unauthorized: authentication required"}, "building it instead"),
        ({"error": "Get http://reg.example/v2/: dial tcp: connection refused"}, "building it instead"),
    ],
)
def test_a_registry_that_cannot_give_the_image_is_a_miss(
    event: dict[str, str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    client = type("Client", (), {"api": _Unreachable([event])})()
    assert pull(client, Registry("reg.example/ci"), "reg.example/ci/torchyard/cpu:0123", {}) is None
    err = capsys.readouterr().err
    assert (said in err) if said else "building" not in err
