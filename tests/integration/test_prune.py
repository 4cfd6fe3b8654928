"""`torchyard prune` on the real engine, limited to an entry of its own so the other tests keep their images:
images and volumes labelled as torchyard's builds and runs label them, for two projects with that entry."""

from __future__ import annotations

import io
import tarfile
import uuid
from pathlib import Path

import docker
import pytest

from torchyard.commands.prune import prune
from torchyard.image.plan import image_repository
from torchyard.run.scopes import ENTRY_LABEL, SCOPE_LABEL, TRUST_LABEL
from torchyard.trust import project_scope

pytestmark = pytest.mark.integration

ENTRY = "prunetest"
# Two adopters' checkouts on one runner, each with an entry named ENTRY (scopes `test...`: conftest removes
# their volumes after each test).
OURS = project_scope(Path("/runner/testprune-ours/matrix.toml"), {})
THEIRS = project_scope(Path("/runner/testprune-theirs/matrix.toml"), {})


def _image(client: docker.DockerClient, base: str, marker: str, project: str = OURS) -> str:
    """A fresh image (a unique line, so no build cache hands back an older one): built later, it is newer.
    `project` "" makes one as torchyard named them before per-project names (`torchyard/<entry>`, no scope)."""
    marker = f"{marker}-{uuid.uuid4().hex[:12]}"
    # 3 MB of its own on top of the shared base.
    dockerfile = f"FROM {base}\nRUN echo {marker} > /marker && head -c 3000000 /dev/urandom > /own\n"
    dockerfile += f"LABEL {ENTRY_LABEL}={ENTRY}" + (f" {SCOPE_LABEL}={project}\n" if project else "\n")
    encoded = dockerfile.encode()
    context = io.BytesIO()
    with tarfile.open(fileobj=context, mode="w") as archive:
        info = tarfile.TarInfo("Dockerfile")
        info.size = len(encoded)
        archive.addfile(info, io.BytesIO(encoded))
    context.seek(0)
    repository = image_repository(project, ENTRY) if project else f"torchyard/{ENTRY}"
    image, _ = client.images.build(fileobj=context, custom_context=True, tag=f"{repository}:{marker}", rm=True)
    return str(image.id)


def _volume(client: docker.DockerClient, project: str) -> str:
    """The trusted cache volume of `project`'s entry, labelled as a run labels it (torchyard.run.scopes)."""
    name = f"torchyard-cache-{project}-{ENTRY}"
    client.volumes.create(name, labels={ENTRY_LABEL: ENTRY, SCOPE_LABEL: project, TRUST_LABEL: "trusted"})
    return name


def _images(client: docker.DockerClient) -> set[str]:
    return {str(image.id) for image in client.images.list(filters={"label": f"{ENTRY_LABEL}={ENTRY}"})}


def _volumes(client: docker.DockerClient) -> set[str]:
    return {str(volume.name) for volume in client.volumes.list(filters={"label": f"{ENTRY_LABEL}={ENTRY}"})}


def _clean(client: docker.DockerClient) -> None:
    for image in client.images.list(filters={"label": f"{ENTRY_LABEL}={ENTRY}"}):
        client.images.remove(str(image.id), force=True)
    for volume in client.volumes.list(filters={"label": f"{ENTRY_LABEL}={ENTRY}"}):
        volume.remove(force=True)


def test_prune_keeps_the_newest_and_what_runs(
    client: docker.DockerClient, local_base: str, capsys: pytest.CaptureFixture[str]
) -> None:
    old, new = _image(client, local_base, "old"), _image(client, local_base, "new")
    created = {image: client.images.get(image).attrs["Created"] for image in (old, new)}
    assert created[old] < created[new], created  # the premise: built in this order, each fresh
    client.containers.create(new, ["true"], name=f"torchyard-{ENTRY}-stopped", labels={ENTRY_LABEL: ENTRY})
    client.volumes.create(f"torchyard-inductor-{ENTRY}", labels={ENTRY_LABEL: ENTRY})
    try:
        assert prune(keep=1, entries=[ENTRY], dry_run=True) == 0
        (row,) = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| image ")]
        assert " GB (3 MB its own) " in row, row  # the base is shared: only its own layer is freed
        assert {old, new} <= {str(image.id) for image in client.images.list(filters={"label": ENTRY_LABEL})}
        assert prune(keep=1, entries=[ENTRY]) == 0
        assert _images(client) == {new}
        assert not client.containers.list(all=True, filters={"name": f"torchyard-{ENTRY}-stopped"})
        assert prune(keep=0, entries=[ENTRY]) == 0
        assert not _images(client)
        assert not client.volumes.list(filters={"name": f"torchyard-inductor-{ENTRY}"})
    finally:
        _clean(client)


def test_two_projects_with_an_entry_of_one_name_are_kept_and_removed_apart(
    client: docker.DockerClient, local_base: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two adopters' `prunetest` on one runner: each keeps its own newest image, and its cache volume while an
    image of its own is left, whatever the other project has; an image named as before projects goes."""
    ours_old, theirs_old = _image(client, local_base, "ours-old"), _image(client, local_base, "theirs-old", THEIRS)
    ours_new, theirs_new = _image(client, local_base, "ours-new"), _image(client, local_base, "theirs-new", THEIRS)
    unscoped = _image(client, local_base, "before-projects", "")
    ours_cache, theirs_cache = _volume(client, OURS), _volume(client, THEIRS)
    try:
        tags = {tag for image in (ours_new, theirs_new) for tag in client.images.get(image).tags}
        assert {tag.rpartition(":")[0] for tag in tags} == {f"torchyard/{OURS}/{ENTRY}", f"torchyard/{THEIRS}/{ENTRY}"}
        assert prune(keep=1, entries=[ENTRY]) == 0
        assert _images(client) == {ours_new, theirs_new}, capsys.readouterr().out
        assert {ours_old, theirs_old, unscoped}.isdisjoint(_images(client))
        assert _volumes(client) == {ours_cache, theirs_cache}
        # Our project's images gone (a runner that stopped building it): its cache goes, theirs stays.
        client.images.remove(ours_new, force=True)
        assert prune(keep=1, entries=[ENTRY]) == 0
        assert _images(client) == {theirs_new}
        assert _volumes(client) == {theirs_cache}
        # One project's prune (`--this-project`), to nothing: the other's image and cache stay.
        ours_again, ours_cache = _image(client, local_base, "ours-again"), _volume(client, OURS)
        assert prune(keep=0, entries=[ENTRY], project=THEIRS) == 0
        assert f"project {THEIRS} only" in capsys.readouterr().out
        assert _images(client) == {ours_again} and _volumes(client) == {ours_cache}
    finally:
        _clean(client)
