"""The pure build plan: build arguments, the content-addressed tag and the context's files.

Tags are content-addressed (Dockerfile, lockfile, base, build arguments, torchyard's in-image files and
the project's source), so an image that exists is reused as it is. An image's name says whose it is:
`torchyard/<project>/<entry>`, the project as `torchyard.trust.project_scope` names it, so two projects with an
entry of the same name on one runner never share a tag or an alias. Nothing here touches Docker.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path

from torchyard import __version__
from torchyard.accelerators import ACCELERATORS
from torchyard.errors import ImageBuildError, UsageError
from torchyard.image.casemodules import check_case_modules
from torchyard.image.context import files_digest, inimage_files, project_digest, project_files, select
from torchyard.image.layers import Layer, keyed, keys_label, split_lock
from torchyard.image.policy import TRUSTED, BuildPolicy
from torchyard.image.source import ProjectFile
from torchyard.image.wheel import build_requirements
from torchyard.lock.lockfile import lock_path, read_header
from torchyard.lock.pairs import mismatched_pair
from torchyard.matrix.schema import Entry
from torchyard.trust import Trust
from torchyard.util import proc
from torchyard.util.checkout import read_checkout_file

REPOSITORY = "torchyard"
# The tag that names an entry's last image, per trust: a trusted build reads `latest` (its base check and its
# layer cache come from it), so an untrusted build never moves it.
ALIASES: dict[Trust, str] = {"trusted": "latest", "untrusted": "untrusted"}


def trusted_alias_of(plan: BuildPlan) -> str:
    """The alias a trusted build of the plan's entry moves (an untrusted plan's own alias is another)."""
    return f"{plan.alias.rpartition(':')[0]}:{ALIASES['trusted']}"


# A trusted build also tags its dependencies stage here, by the key of its last dependency group (which
# covers every group and what lies below them): an untrusted build of the same pins stands on it. Shared by
# every project: the key is the pins' (with their hashes) and what lies below them, nothing of a project's.
DEPENDENCY_REPOSITORY = f"{REPOSITORY}/dependencies"
# The build arguments in scope for the dependency layers (the rest label the image).
LAYER_ARGS = frozenset(
    {"BASE_IMAGE", "BASE_DIGEST", "PYTHON", "VENDOR_PACKAGES", "SYSTEM_PACKAGES", "UV_VERSION", "WHEELS_ONLY"}
)
# The project's pytest configuration travels with its tests (rootdir and markers come from it).
PYTEST_CONFIG = ("pyproject.toml", "pytest.ini", "tox.ini", "setup.cfg", "conftest.py")


# A source checkout (an editable install) has the image's files at the top level, in docker/; the wheel maps
# them into this package (pyproject.toml, force-include).
CHECKOUT_DOCKER = Path(__file__).resolve().parents[3] / "docker"


def image_file(name: str) -> bytes:
    """`Dockerfile`, `.dockerignore` or `install-layer.sh`: package data in a wheel, docker/ in a source checkout."""
    shipped = files("torchyard.image").joinpath(name)
    if shipped.is_file():
        return shipped.read_bytes()
    if (CHECKOUT_DOCKER.parent / "pyproject.toml").is_file() and (CHECKOUT_DOCKER / name).is_file():
        return (CHECKOUT_DOCKER / name).read_bytes()
    raise ImageBuildError(f"torchyard's {name} is missing from its package: reinstall torchyard")


def dockerfile() -> bytes:
    """The one Dockerfile."""
    return image_file("Dockerfile")


def checked_dockerfile(text: bytes) -> bytes:
    """torchyard's Dockerfile, refused if any step mounts a cache: a cache shared between builds is a channel from
    one build (an approved pull request's) to the next, and from one project to another (issue 57, route 8)."""
    if b"--mount=type=cache" in text:
        raise ImageBuildError("torchyard's Dockerfile mounts a build cache, which builds would share")
    return text


@dataclass(frozen=True)
class BuildOptions:
    """Passed through to the builder so runners can share a registry cache."""

    push: bool = False
    cache_from: tuple[str, ...] = ()
    cache_to: tuple[str, ...] = ()


NO_OPTIONS = BuildOptions()


@dataclass(frozen=True)
class BuildPlan:
    """Everything one image build needs: `context` maps each of torchyard's paths in the build context to
    its bytes; `workspace` is the project's tests (under `workspace/`), or a source folder's every file, links
    kept as links; a package's `project_root` and `project_files` are what its wheel is built from."""

    entry: str
    base_image: str
    build_args: tuple[tuple[str, str], ...]
    tag: str
    alias: str
    vendor: tuple[str, ...]
    python: str
    context: tuple[tuple[str, bytes], ...]
    project_root: Path | None  # built into a wheel for the context when the image is built
    project_files: tuple[ProjectFile, ...]
    workspace: tuple[ProjectFile, ...] = ()
    build_requires: tuple[str, ...] = ()  # the project's [build-system] requires, checked
    layers: tuple[Layer, ...] = ()  # the lock's groups, one image layer each, in install order
    # The dependency image of these pins as a trusted build tags it, and, for an untrusted build that stands
    # on it instead of installing the lock itself, that image's ID ("" otherwise).
    dependency_tag: str = ""
    stands_on: str = ""


def image_repository(project: str, entry: str) -> str:
    """Where an entry's images are tagged: `torchyard/<project>/<entry>`, one repository per project and entry."""
    return f"{REPOSITORY}/{project}/{entry}"


def dependency_tag(layers: tuple[Layer, ...]) -> str:
    return f"{DEPENDENCY_REPOSITORY}:{layers[-1].key}" if layers else ""


def resolve_base(entry: Entry, overrides: Mapping[str, str]) -> str:
    """The base for this machine: an override by entry name, then by accelerator, else matrix.toml's."""
    matrix_base = str(entry.accelerator.require_base_image())
    return overrides.get(entry.name) or overrides.get(entry.accelerator.name) or matrix_base


def _read_lock(entry: Entry, lockdir: Path) -> bytes:
    path = lock_path(lockdir, entry)
    try:
        return read_checkout_file(path, f"entry {entry.name!r}: the lockfile")
    except UsageError as error:
        raise ImageBuildError(str(error)) from None


def plan_build(
    entry: Entry,
    lockdir: Path,
    *,
    project: str,
    base_image: str,
    base_id: str,
    uv_version: str,
    revision: str,
    source_date_epoch: str,
    policy: BuildPolicy = TRUSTED,
    stands_on: tuple[str, str] | None = None,
    git: proc.DataRunner = proc.data,
) -> BuildPlan:
    """Everything the build needs, decided without touching Docker; `project` names the project on this runner
    (`torchyard.trust.project_scope`), in the image's name and label. An untrusted `policy` gets a
    content tag and an alias of its own: nothing it builds is what a trusted build reads.
    `stands_on` (a dependency image's tag and ID, from a trusted build of the same pins) makes the image
    stage start from that image: the untrusted build then installs no package of the lock."""
    scope: Trust = "trusted" if policy.trusted else "untrusted"
    image_dockerfile = checked_dockerfile(dockerfile())
    lock_bytes = _read_lock(entry, lockdir)
    fields, _ = read_header(lock_bytes.decode("utf-8", errors="replace"))
    vendor = tuple(pin.name for pin in entry.accelerator.vendor)
    context: list[tuple[str, bytes]] = [
        ("Dockerfile", image_dockerfile),
        (".dockerignore", image_file(".dockerignore")),
        ("lock.txt", lock_bytes),
        ("install-layer.sh", image_file("install-layer.sh")),
    ]
    try:
        layers = split_lock(lock_bytes.decode("utf-8", errors="replace"))
    except ValueError as error:
        raise ImageBuildError(f"entry {entry.name!r}: {lock_path(lockdir, entry)}: {error}") from None
    mismatch = mismatched_pair((pin for layer in layers for pin in layer.pins), entry.accelerator.platform)
    if mismatch:  # a lock written by hand, or by a torchyard without the pair's row: before anything is built
        raise ImageBuildError(f"entry {entry.name!r}: {lock_path(lockdir, entry)}: {mismatch}")
    context += [(layer.path, layer.text.encode()) for layer in layers]
    context += [(f"inimage/{name}", node.read_bytes()) for name, node in inimage_files()]
    sources: tuple[ProjectFile, ...] = ()
    workspace: tuple[ProjectFile, ...] = ()
    build_requires: tuple[str, ...] = ()
    packaged = entry.project is not None and entry.project.kind == "package"
    if entry.project is not None:
        sources = project_files(entry.project.root, git)
        check_case_modules(entry.name, entry.cases, (item.path for item in sources))
    if packaged:
        workspace = select(sources, [*entry.test_paths, *PYTEST_CONFIG]) if entry.tests else ()
        build_requires = build_requirements(sources)  # checked here: before any build or container starts
    elif entry.project is not None:  # a source folder is the workspace, whole: no wheel, no build backend
        workspace = sources
    content_args = (
        ("BASE_IMAGE", base_image),
        ("PYTHON", f"python{entry.python}"),
        ("VENDOR_PACKAGES", " ".join(vendor)),
        ("SYSTEM_PACKAGES", " ".join(entry.accelerator.system_packages)),
        ("IMAGE_CHECKS", " ".join(ACCELERATORS[entry.accelerator.name].IMAGE_CHECKS)),
        ("UV_VERSION", uv_version),
        ("TORCHYARD_ENTRY", entry.name),
        ("LOCK_DIGEST", fields.get("body-digest", "")),
        ("BASE_DIGEST", base_id),
        ("TORCHYARD_VERSION", __version__),
        ("PROJECT", entry.project.name if entry.project else ""),
        ("PROJECT_SCOPE", project),
        ("WORKSPACE_ON_PATH", "1" if entry.project is not None and not packaged else ""),
        *policy.build_args,
    )
    # What decides the image below the first dependency layer; the label-only arguments (entry, lock
    # digest, versions) come after the groups in the Dockerfile, so they stay out.
    # The keys name the pins and what lies below them, never the project: a trusted build's dependency image is
    # found by any project's untrusted build of the same pins (standing on it, the groups are that image's).
    below = hashlib.sha256(image_dockerfile + image_file("install-layer.sh"))
    for name, node in inimage_files():
        if name.endswith(("/inimage/checks/vendor.py", "/inimage/start/warden.py")):  # the toolchain stage's
            below.update(node.read_bytes())
    for key, value in content_args:
        if key in LAYER_ARGS and not (stands_on and key == "WHEELS_ONLY"):
            below.update(f"{key}={value}\0".encode())
    layers = keyed(layers, below.hexdigest())
    if stands_on is not None:
        content_args = (*content_args, ("DEPENDENCIES", stands_on[0]))
    digest = hashlib.sha256()
    for key, value in content_args:
        digest.update(f"{key}={value}\0".encode())
    if stands_on is not None:
        digest.update(f"dependencies-id={stands_on[1]}\0".encode())
    digest.update(files_digest(context).encode())
    if entry.project is not None:
        digest.update(b"workspace\0" + project_digest(workspace).encode())
        digest.update(b"project\0" + project_digest(sources).encode())
    # The revision and date label the image; they do not make its content, so they stay out of the tag.
    # Inline cache metadata lets a later build reuse this image's layers even after the builder's own
    # cache was pruned (it is passed as --cache-from then).
    build_args = (
        *content_args,
        ("CONTENT_DIGEST", digest.hexdigest()),
        ("GIT_REVISION", revision),
        ("SOURCE_DATE_EPOCH", source_date_epoch),
        ("BUILDKIT_INLINE_CACHE", "1"),
        ("LAYER_KEYS", keys_label(layers)),
    )
    return BuildPlan(
        entry=entry.name,
        base_image=base_image,
        build_args=build_args,
        tag=f"{image_repository(project, entry.name)}:{digest.hexdigest()}",
        alias=f"{image_repository(project, entry.name)}:{ALIASES[scope]}",
        vendor=vendor,
        python=entry.python,
        context=tuple(context),
        project_root=entry.project.root if entry.project is not None and packaged else None,
        project_files=sources if packaged else (),
        workspace=workspace,
        build_requires=build_requires,
        layers=layers,
        dependency_tag=dependency_tag(layers),
        stands_on=stands_on[1] if stands_on else "",
    )
