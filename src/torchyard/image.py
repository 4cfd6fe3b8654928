"""Per-entry images: a pure build plan, then one BuildKit build from the entry's lockfile.

Tags are content-addressed (Dockerfile, lockfile, base, build arguments, the source copied in), so an
image that exists is reused as it is. The build writes an image ID file and only then is the image
tagged: an interrupted build leaves no tag pointing at a half-built image.
"""

from __future__ import annotations

import hashlib
import os
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import docker
import docker.errors
from docker.models.images import Image

from torchyard import __version__, cmd
from torchyard.engine import DockerCli
from torchyard.errors import ImageBuildError
from torchyard.install import extra_find_links
from torchyard.lock import lock_path, read_header
from torchyard.matrix.schema import Entry
from torchyard.mirrors import Source, index_args, load_mirrors, sources_for
from torchyard.serve import served

DOCKERFILE = Path("docker/Dockerfile")
SOURCE_PATHS = (DOCKERFILE, Path(".dockerignore"), Path("src"), Path("tests/stack"))
REPOSITORY = "torchyard"
CA_BUNDLES = ("/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt")


@dataclass(frozen=True)
class BuildOptions:
    """Passed through to the builder so runners can share a registry cache."""

    push: bool = False
    cache_from: tuple[str, ...] = ()
    cache_to: tuple[str, ...] = ()


@dataclass(frozen=True)
class BuildPlan:
    entry: str
    base_image: str
    lockfile: Path
    build_args: tuple[tuple[str, str], ...]
    tag: str
    alias: str
    vendor: tuple[str, ...]
    python: str


def source_digest(root: Path) -> str:
    """sha256 over the files the image copies in (names and bytes), caches excluded."""
    digest = hashlib.sha256()
    for top in SOURCE_PATHS:
        path = root / top
        files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
        for file in files:
            if "__pycache__" in file.parts:
                continue
            digest.update(str(file.relative_to(root)).encode() + b"\0" + file.read_bytes() + b"\0")
    return digest.hexdigest()


def resolve_base(entry: Entry, overrides: Mapping[str, str]) -> str:
    """The base for this machine: an override by entry name, then by accelerator, else matrix.toml's."""
    return overrides.get(entry.name) or overrides.get(entry.accelerator.name) or str(entry.accelerator.base_image)


def plan_build(
    entry: Entry,
    root: Path,
    lockdir: Path,
    *,
    base_image: str,
    base_id: str,
    uv_version: str,
    revision: str,
    source_date_epoch: str,
) -> BuildPlan:
    """Everything the build needs, decided without touching Docker."""
    lockfile = lock_path(lockdir, entry)
    try:
        in_context = (root / lockfile).resolve().relative_to(root.resolve())
    except ValueError:
        raise ImageBuildError(f"entry {entry.name!r}: {lockfile} is outside the build context {root}") from None
    lock_bytes = (root / lockfile).read_bytes()
    fields, _ = read_header(lock_bytes.decode("utf-8"))
    vendor = tuple(pin.name for pin in entry.accelerator.vendor)
    content_args = (
        ("BASE_IMAGE", base_image),
        ("PYTHON", f"python{entry.python}"),
        ("VENDOR_PACKAGES", " ".join(vendor)),
        ("UV_VERSION", uv_version),
        ("LOCKFILE", str(in_context)),
        ("TORCHYARD_ENTRY", entry.name),
        ("LOCK_DIGEST", fields.get("body-digest", "")),
        ("BASE_DIGEST", base_id),
        ("TORCHYARD_VERSION", __version__),
    )
    digest = hashlib.sha256()
    for key, value in content_args:
        digest.update(f"{key}={value}\0".encode())
    digest.update(source_digest(root).encode())
    digest.update(lock_bytes)
    # The revision and date label the image; they do not make its content, so they stay out of the tag.
    # Inline cache metadata lets a later build reuse this image's layers even after the builder's own
    # cache was pruned (it is passed as --cache-from then).
    build_args = (
        *content_args,
        ("GIT_REVISION", revision),
        ("SOURCE_DATE_EPOCH", source_date_epoch),
        ("BUILDKIT_INLINE_CACHE", "1"),
    )
    return BuildPlan(
        entry=entry.name,
        base_image=base_image,
        lockfile=in_context,
        build_args=build_args,
        tag=f"{REPOSITORY}/{entry.name}:{digest.hexdigest()[:16]}",
        alias=f"{REPOSITORY}/{entry.name}:latest",
        vendor=vendor,
        python=entry.python,
    )


def docker_build_args(
    plan: BuildPlan,
    cli: DockerCli,
    *,
    iidfile: Path,
    secrets: Mapping[str, Path],
    host_network: bool,
    options: BuildOptions,
) -> tuple[str, ...]:
    """The builder's argument list (pure, so tests assert on it)."""
    args = [*cli.build_command(), "--file", str(DOCKERFILE), "--progress", "plain", "--iidfile", str(iidfile)]
    for key, value in plan.build_args:
        args += ["--build-arg", f"{key}={value}"]
    for name, path in sorted(secrets.items()):
        args += ["--secret", f"id={name},src={path}"]
    if host_network:
        args += ["--network", "host"]
    for ref in options.cache_from:
        args += ["--cache-from", ref]
    if options.cache_to or options.push:
        if cli.builder != "buildx":
            raise ImageBuildError("--push and --cache-to need `docker buildx` (this client builds with plain BuildKit)")
        args += [item for ref in options.cache_to for item in ("--cache-to", ref)]
    if options.push:
        args += ["--tag", plan.tag, "--tag", plan.alias, "--push"]
    elif cli.builder == "buildx":
        args.append("--load")
    args.append(".")
    return tuple(args)


def _local_image(client: docker.DockerClient, name: str) -> Image | None:
    try:
        return client.images.get(name)
    except docker.errors.ImageNotFound:
        return None


def check_base(client: docker.DockerClient, plan: BuildPlan) -> None:
    """Before any layer: the base has the entry's Python, or apt to install it (vendor bases: Python)."""
    if _local_image(client, plan.base_image) is None:
        return  # pulled by the build; it checks Python itself in the first step
    python = f"python{plan.python}"
    probe = f"command -v {python}" if plan.vendor else f"command -v {python} || command -v apt-get"
    try:
        client.containers.run(plan.base_image, ["/bin/sh", "-c", probe], remove=True, entrypoint=[])
    except docker.errors.ContainerError:
        needs = python if plan.vendor else f"{python} and no apt-get to install it"
        raise ImageBuildError(f"entry {plan.entry!r}: base image {plan.base_image} has no {needs}") from None


def _ca_bundle(env: Mapping[str, str]) -> Path | None:
    for candidate in (env.get("SSL_CERT_FILE", ""), *CA_BUNDLES):
        if candidate and Path(candidate).is_file():
            return Path(candidate)
    return None


@dataclass(frozen=True)
class Built:
    entry: str
    tag: str
    size_bytes: int
    seconds: float
    reused: bool


def build_image(
    entry: Entry,
    plan: BuildPlan,
    client: docker.DockerClient,
    cli: DockerCli,
    *,
    options: BuildOptions = BuildOptions(),
    runner: cmd.Runner = cmd.run,
    env: Mapping[str, str] = os.environ,
) -> Built:
    """Build `plan` unless its tag exists; the base is checked before the first layer (the caller has
    checked the lock)."""
    started = time.monotonic()
    existing = _local_image(client, plan.tag)
    if existing is not None and not options.push:
        existing.tag(plan.alias)
        return Built(entry.name, plan.tag, existing.attrs["Size"], time.monotonic() - started, reused=True)
    check_base(client, plan)
    if _local_image(client, plan.alias) is not None and not options.cache_from:
        options = replace(options, cache_from=(plan.alias,))
    sources = [
        *sources_for(entry.indexes, load_mirrors(env)),
        *(Source("local", "find-links", f) for f in extra_find_links(env)),
    ]
    with (
        tempfile.TemporaryDirectory(prefix="torchyard-build-") as scratch,
        served(sources) as (reachable, host_network),
    ):
        iidfile = Path(scratch) / "iid"
        (Path(scratch) / "index-args").write_text(" ".join(index_args(reachable)) + "\n")  # `read` wants the newline
        secrets = {"uv-index-args": Path(scratch) / "index-args"}
        ca_bundle = _ca_bundle(env)
        if ca_bundle is not None:
            secrets["cacert"] = ca_bundle
        args = docker_build_args(
            plan, cli, iidfile=iidfile, secrets=secrets, host_network=host_network, options=options
        )
        print(f"building {plan.tag} for entry {entry.name!r} from {plan.base_image}", file=sys.stderr, flush=True)
        runner(args, env=cli.build_env(env))
        image_id = iidfile.read_text().strip() if iidfile.exists() else ""
    if options.push:
        return Built(entry.name, plan.tag, 0, time.monotonic() - started, reused=False)
    image = client.images.get(image_id)
    image.tag(plan.tag)
    image.tag(plan.alias)
    return Built(entry.name, plan.tag, image.attrs["Size"], time.monotonic() - started, reused=False)


def build_summary(rows: Sequence[Built]) -> list[tuple[str, str, str, str, str]]:
    return [
        (row.entry, row.tag, f"{row.size_bytes / 1e9:.2f} GB", f"{row.seconds:.1f}", "yes" if row.reused else "no")
        for row in rows
    ]
