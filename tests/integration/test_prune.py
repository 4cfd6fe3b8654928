"""`torchyard prune` on the real engine, limited to an entry of its own so the other tests keep their images."""

from __future__ import annotations

import io
import tarfile
import uuid

import docker
import pytest

from torchyard.commands.prune import prune

pytestmark = pytest.mark.integration

ENTRY = "prunetest"


def _image(client: docker.DockerClient, base: str, marker: str) -> str:
    """A fresh image (a unique line, so no build cache hands back an older one): built later, it is newer."""
    marker = f"{marker}-{uuid.uuid4().hex[:12]}"
    # 3 MB of its own on top of the shared base.
    dockerfile = f"FROM {base}\nRUN echo {marker} > /marker && head -c 3000000 /dev/urandom > /own\n"
    dockerfile += f"LABEL dev.torchyard.entry={ENTRY}\n"
    encoded = dockerfile.encode()
    context = io.BytesIO()
    with tarfile.open(fileobj=context, mode="w") as archive:
        info = tarfile.TarInfo("Dockerfile")
        info.size = len(encoded)
        archive.addfile(info, io.BytesIO(encoded))
    context.seek(0)
    image, _ = client.images.build(fileobj=context, custom_context=True, tag=f"torchyard/{ENTRY}:{marker}", rm=True)
    return str(image.id)


def test_prune_keeps_the_newest_and_what_runs(
    client: docker.DockerClient, local_base: str, capsys: pytest.CaptureFixture[str]
) -> None:
    old, new = _image(client, local_base, "old"), _image(client, local_base, "new")
    created = {image: client.images.get(image).attrs["Created"] for image in (old, new)}
    assert created[old] < created[new], created  # the premise: built in this order, each fresh
    client.containers.create(new, ["true"], name=f"torchyard-{ENTRY}-stopped", labels={"dev.torchyard.entry": ENTRY})
    client.volumes.create(f"torchyard-inductor-{ENTRY}", labels={"dev.torchyard.entry": ENTRY})
    try:
        assert prune(keep=1, entries=[ENTRY], dry_run=True) == 0
        (row,) = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| image ")]
        assert " GB (3 MB its own) " in row, row  # the base is shared: only its own layer is freed
        assert {old, new} <= {str(image.id) for image in client.images.list(filters={"label": "dev.torchyard.entry"})}
        assert prune(keep=1, entries=[ENTRY]) == 0
        left = {str(image.id) for image in client.images.list(filters={"label": f"dev.torchyard.entry={ENTRY}"})}
        assert left == {new}
        assert not client.containers.list(all=True, filters={"name": f"torchyard-{ENTRY}-stopped"})
        assert prune(keep=0, entries=[ENTRY]) == 0
        assert not client.images.list(filters={"label": f"dev.torchyard.entry={ENTRY}"})
        assert not client.volumes.list(filters={"name": f"torchyard-inductor-{ENTRY}"})
    finally:
        for image in client.images.list(filters={"label": f"dev.torchyard.entry={ENTRY}"}):
            client.images.remove(str(image.id), force=True)
