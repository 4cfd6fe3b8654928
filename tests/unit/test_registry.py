"""The registry a machine shares: image references, the build client's private config, pulls that miss
(its name and credentials are the machine's settings: tests/unit/test_machine.py; the engine-facing parts
are tested against a real registry in tests/integration)."""

from __future__ import annotations

import base64
import json
import stat
from pathlib import Path

import pytest

from torchyard.image.builder import client_environment
from torchyard.image.registry import pull, registry_host
from torchyard.matrix.machine import Registry


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
