"""Cache scopes on a real engine: the seed that copies the trusted cache volume into an untrusted run's own
writes nothing of an image's into either volume. (No image build mounts a uv cache: tests/unit/test_image.py.)"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from pathlib import Path

import docker
import docker.errors
import docker.types
import pytest

from torchyard import contract
from torchyard.errors import ConfigError
from torchyard.host.engine import build_client
from torchyard.matrix import load_plan
from torchyard.run.container import _volume_exists
from torchyard.run.scopes import SEED_TARGET, CacheScope, cache_scope, prime_volume, seed_args
from torchyard.util import proc

pytestmark = pytest.mark.integration


def _volume_files(client: docker.DockerClient, volume: str, base: str) -> list[str]:
    """What `volume` holds, listed by a container that mounts it `volume-nocopy` (so listing fills nothing)."""
    mount = docker.types.Mount("/v", volume, type="volume", no_copy=True, read_only=True)
    listed = client.containers.run(base, ["/bin/ls", "-A", "/v"], remove=True, entrypoint=[], mounts=[mount])
    return sorted(listed.decode().split())


@pytest.fixture
def hostile_image(client: docker.DockerClient, local_base: str, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """A pull request's image (its ID, and the name of what it planted): files at `/seed`, in the cache's folder
    (world-writable and sticky, as torchyard's image has it) and in root's cache."""
    planted = f"planted-{uuid.uuid4().hex[:8]}"
    (tmp_path / "Dockerfile").write_text(
        f"FROM {local_base}\n"
        f"RUN mkdir -p {SEED_TARGET} {contract.IMAGE_CACHE} /root/.cache && touch {SEED_TARGET}/{planted} "
        f"{contract.IMAGE_CACHE}/{planted} /root/.cache/{planted} && chmod -R a+rwX {SEED_TARGET} "
        f"&& chmod 1777 {contract.IMAGE_CACHE}\n"
    )
    image, _ = client.images.build(path=str(tmp_path), rm=True)
    yield str(image.id), planted
    client.images.remove(str(image.id), force=True)


@pytest.fixture
def volumes(client: docker.DockerClient) -> Iterator[CacheScope]:
    """An untrusted run's scope: its own volume and the trusted one it is seeded from, both empty."""
    name = f"torchyard-cache-test-{uuid.uuid4().hex[:8]}"
    scope = CacheScope(f"{name}-untrusted-1", name, "test", "untrusted")
    for volume in (scope.volume, name):
        client.volumes.create(volume, labels={"dev.torchyard.scope": "test"})
    yield scope
    for volume in (scope.volume, name):
        with contextlib.suppress(docker.errors.APIError):
            client.volumes.get(volume).remove(force=True)


def test_an_empty_trusted_volume_stays_empty_when_seeded_from(
    client: docker.DockerClient, local_base: str, hostile_image: tuple[str, str], volumes: CacheScope
) -> None:
    """Route 5 of issue 57: Docker fills an empty volume from the image at its mount point, read-only or not,
    unless the mount says `volume-nocopy`. A seed from an empty trusted volume leaves both volumes empty, in
    torchyard's helper image (the base) and even given a pull request's image holding files where they mount."""
    cli = build_client()
    for image in (hostile_image[0], local_base):
        args = seed_args(
            volumes, str(volumes.seed), image=image, user="1000:1000", name=f"torchyard-{uuid.uuid4().hex}"
        )
        proc.run((cli.path, *args))
        assert _volume_files(client, str(volumes.seed), local_base) == []  # the trusted volume: never written
        assert _volume_files(client, volumes.volume, local_base) == []  # nothing of the image's reaches the copy


def test_the_seed_copies_the_trusted_volume_into_the_runs_own_in_the_base(
    client: docker.DockerClient, local_base: str, hostile_image: tuple[str, str], volumes: CacheScope
) -> None:
    """What the seed is for still works, run in the base as an unprivileged user: the trusted scope's files
    reach the run's own volume (primed from the run's image, whose files reach that volume only)."""
    image, planted = hostile_image
    fill = docker.types.Mount("/v", str(volumes.seed), type="volume", no_copy=True)
    command = ["/bin/sh", "-c", "echo warm > /v/kept && chown -R 1000:1000 /v && chmod 1777 /v"]
    client.containers.run(local_base, command, remove=True, entrypoint=[], mounts=[fill])
    prime_volume(client, volumes, image)
    args = seed_args(volumes, str(volumes.seed), image=local_base, user="1000:1000", name=f"torchyard-{planted}")
    proc.run((build_client().path, *args))
    assert _volume_files(client, volumes.volume, local_base) == sorted(["kept", planted])
    assert _volume_files(client, str(volumes.seed), local_base) == ["kept"]


@pytest.mark.parametrize(
    ("found", "trust"),
    [
        ({"dev.torchyard.trust": "untrusted"}, "trusted"),  # an untrusted run's leftover under the trusted name
        ({"dev.torchyard.entry": "other"}, "trusted"),  # another entry's
        ({}, "trusted"),  # made by hand, or by anything else
        ({"dev.torchyard.trust": "untrusted"}, "untrusted"),  # the seed an untrusted run would copy from
    ],
)
def test_a_volume_under_the_scopes_name_that_its_labels_do_not_say_is_the_scopes_is_refused(
    client: docker.DockerClient, found: dict[str, str], trust: str
) -> None:
    """The engine hands back an existing volume on create, labels as they were: a volume named as this
    scope's (or as the trusted scope an untrusted run is seeded from) is used only where its labels say so."""
    entry = load_plan(Path(__file__).parents[2] / "matrix.toml").entry("cpu")
    project = f"test{uuid.uuid4().hex[:8]}"
    scope = cache_scope(entry, project, trust, "1")  # type: ignore[arg-type]
    trusted_scope = cache_scope(entry, project, "trusted", "1")
    planted = trusted_scope.volume
    labels = {**trusted_scope.labels(entry), **found} if found else {}
    client.volumes.create(planted, labels=labels)
    try:
        wanted = {**scope.labels(entry), "dev.torchyard.trust": "trusted"}
        with pytest.raises(ConfigError, match=f"the volume {planted} is not this scope's cache"):
            _volume_exists(client, planted, wanted)
        assert _volume_exists(client, f"{planted}-absent", wanted) is False
    finally:
        client.volumes.get(planted).remove(force=True)
