"""Build an entry's image with BuildKit from its plan: stage the context, build, tag only on success.

The build writes an image ID file and only then is the image tagged: an interrupted build leaves no tag
pointing at a half-built image. The CA bundle and the index arguments (which may carry credentials) are
BuildKit secrets, never in a layer or the history.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import docker
import docker.errors
from docker.models.images import Image

from torchyard.accelerators import ACCELERATORS
from torchyard.errors import CommandError, ImageBuildError
from torchyard.host.engine import DockerCli
from torchyard.image.check import check_image
from torchyard.image.layers import Layer, read_keys_label
from torchyard.image.plan import BuildOptions, BuildPlan, trusted_alias_of
from torchyard.image.policy import BuildPolicy, check_entry, without_credentials
from torchyard.image.registry import Transfer, client_environment, pull, push
from torchyard.image.serve import bridge_address, served
from torchyard.image.source import ProjectFile, write_files
from torchyard.image.wheel import build_wheel_sealed
from torchyard.matrix.machine import Registry, Source, index_args
from torchyard.matrix.schema import Entry
from torchyard.seal import run_user
from torchyard.util import proc
from torchyard.util.proc import cause

NO_OPTIONS = BuildOptions()
TRUSTED = BuildPolicy()
CA_BUNDLES = ("/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt")


def docker_build_args(
    plan: BuildPlan,
    cli: DockerCli,
    *,
    context: Path,
    iidfile: Path,
    secrets: Mapping[str, Path],
    host_network: bool,
    options: BuildOptions,
    target: str | None = None,
) -> tuple[str, ...]:
    """The builder's argument list (pure, so tests assert on it); `target` stops at that stage."""
    args = [*cli.build_command(), "--file", str(context / "Dockerfile"), "--progress", "plain"]
    if target is not None:
        args += ["--target", target]
    args += ["--iidfile", str(iidfile)]
    for key, value in plan.build_args:
        args += ["--build-arg", f"{key}={value}"]
    for name, path in sorted(secrets.items()):
        args += ["--secret", f"id={name},src={path}"]
    if host_network:
        args += ["--network", "host"]
    for ref in options.cache_from:
        args += ["--cache-from", ref]
    if options.cache_to:
        if cli.builder != "buildx":
            raise ImageBuildError(
                "--cache-to needs `docker buildx` (this client builds with plain BuildKit; its images carry their "
                "layer cache inline, so pushing them shares it: `torchyard build --push`)"
            )
        args += [item for ref in options.cache_to for item in ("--cache-to", ref)]
    if cli.builder == "buildx":
        args.append("--load")
    args.append(str(context))
    return tuple(args)


def wheel_build_args(source: Path, out_dir: Path, sources: Sequence[Source]) -> tuple[str, ...]:
    """`uv build --wheel` for the project on this host (`--local` only, which is unsandboxed); its build
    backend comes from the entry's indexes. Image builds use `torchyard.image.wheel`, sealed."""
    return ("uv", "build", "--wheel", "--no-config", "--out-dir", str(out_dir), *index_args(sources), str(source))


def stage_context(plan: BuildPlan, context: Path) -> None:
    """Write the context: the planned files and the project's tests, links as links (the project's wheel
    joins them once built, sealed)."""
    for name, data in plan.context:
        target = context / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    (context / "workspace").mkdir(exist_ok=True)
    write_files(plan.workspace, context / "workspace")
    (context / "project").mkdir(exist_ok=True)


def build_project_wheel(
    entry: str,
    files: Sequence[ProjectFile],
    out_dir: Path,
    sources: Sequence[Source],
    *,
    runner: proc.Runner,
    env: Mapping[str, str],
) -> list[Path]:
    """Build the project's wheel from exactly `files` (its source, written aside) into `out_dir`."""
    with tempfile.TemporaryDirectory(prefix="torchyard-project-") as scratch:
        source = Path(scratch)
        write_files(files, source)
        print(f"building the project's wheel from {len(files)} files", file=sys.stderr, flush=True)
        try:
            runner(wheel_build_args(source, out_dir, sources), env={**env, "UV_NO_PROGRESS": "1"})
        except CommandError as error:
            raise ImageBuildError(f"entry {entry!r}: the project's wheel did not build ({error})") from None
    return sorted(out_dir.glob("*.whl"))


UNREACHABLE = re.compile(r"no such host|dial tcp|connection refused|i/o timeout|TLS handshake|server misbehaving")
STEP_MESSAGE = re.compile(r"^(?:#\d+ \d+\.\d+ )?((?:vendor guard|image check|system packages): .*)$", re.MULTILINE)
MISSING = re.compile(r"manifest unknown|not found|pull access denied|repository does not exist")


def failed_step_line(output: str) -> str:
    """The last line the failing BuildKit step printed (`#12 0.085 useradd: UID 1000 is not unique`), which
    says more than BuildKit's own `executor failed running [<the whole command>]`."""
    failed = re.findall(r"^#(\d+) ERROR:", output, re.MULTILINE)
    if not failed:
        return ""
    printed = re.findall(rf"^#{failed[-1]} \d+\.\d+ (.*\S.*)$", output, re.MULTILINE)
    return proc.redact(printed[-1].strip())[:400] if printed else ""


def explain_build_failure(entry: Entry, plan: BuildPlan, error: CommandError) -> str:
    """One line, cause first, with what to do; the build's own output is above it."""
    output = error.output
    # The guard's, the image check's or the system packages' own output line (BuildKit prefixes it with its
    # step and time) says what and why; the step's echoed command names them too, and is not that line.
    guard = STEP_MESSAGE.search(output)
    if guard:
        return f"entry {entry.name!r}: the image build failed: {guard[1]}"
    base_step = plan.base_image in output and ("load metadata for" in output or "FROM" in output)
    if base_step and UNREACHABLE.search(output):
        return (
            f"entry {entry.name!r}: cannot pull base image {plan.base_image}: the registry is unreachable "
            f"({cause(output)}); make a local base with `nox -s base-image` and set "
            f"TORCHYARD_BASE_IMAGES={entry.accelerator.name}=torchyard/base:bookworm, or configure a registry "
            "mirror (`registry-mirrors` in /etc/docker/daemon.json)"
        )
    if base_step and MISSING.search(output):
        return (
            f"entry {entry.name!r}: base image {plan.base_image} is not in its registry ({cause(output)}); "
            "check the digest in matrix.toml (`nox -s refresh` moves it) or TORCHYARD_BASE_IMAGES"
        )
    why = failed_step_line(output) or cause(output) or f"exit status {error.returncode}"
    return f"entry {entry.name!r}: the image build failed: {why}"


def _local_image(client: docker.DockerClient, name: str) -> Image | None:
    try:
        return client.images.get(name)
    except docker.errors.ImageNotFound:
        return None


BASE_DIGEST_LABEL = "org.opencontainers.image.base.digest"


def check_base(client: docker.DockerClient, plan: BuildPlan) -> None:
    """Before any layer: the base has the entry's Python, or apt to install it (vendor bases: Python).
    A container is started to look (0.25 s), except where this entry's last image was built from this
    very base (its label says so): that build found it, and a source-only rebuild need not look again."""
    if _local_image(client, plan.base_image) is None:
        return  # pulled by the build; it checks Python itself in the first step
    last = _local_image(client, plan.alias)
    base_digest = dict(plan.build_args).get("BASE_DIGEST", "")
    if last is not None and base_digest and (last.labels or {}).get(BASE_DIGEST_LABEL) == base_digest:
        return
    python = f"python{plan.python}"
    probe = f"command -v {python}" if plan.vendor else f"command -v {python} || command -v apt-get"
    try:
        client.containers.run(plan.base_image, ["/bin/sh", "-c", probe], remove=True, entrypoint=[])
    except docker.errors.ContainerError:
        needs = python if plan.vendor else f"{python} and no apt-get to install it"
        raise ImageBuildError(f"entry {plan.entry!r}: base image {plan.base_image} has no {needs}") from None


def needs_more_than_free(need: int, free: int) -> bool:
    """A build that needs about `need` bytes leaves a margin."""
    return need > 0 and free < need + (2 << 30)


def rebuilt_bytes(history: Sequence[Mapping[str, object]], size: int, kept: Sequence[str]) -> int:
    """What a new build of an entry writes, estimated from its last image: the bytes of that image's
    layers above the last dependency group the new build keeps (`kept`: the groups, in install order,
    whose keys match; their layers are reused), or the whole image when it keeps none. `history` is the
    engine's, newest layer first."""
    if not kept:
        return size
    marker = f"install-layer.sh {kept[-1]}"
    above = 0
    for layer in history:
        if marker in str(layer.get("CreatedBy", "")):
            return above
        above += int(str(layer.get("Size", 0)) or 0)
    return size  # the group's layer is not in the history: reuse cannot be assumed


def check_free_disk(client: docker.DockerClient, plan: BuildPlan) -> None:
    """Before a build: stop with the fix when the engine's disk cannot hold what this build adds to
    what the entry's last image already holds."""
    root = Path(str(client.info().get("DockerRootDir", "")))
    last = _local_image(client, plan.alias)
    if last is None or not root.is_dir():
        return  # nothing to estimate from, or a remote engine whose disk this host cannot see
    had = read_keys_label((last.labels or {}).get(LAYERS_LABEL, ""))
    groups = [layer for layer in plan.layers if layer.pins]
    kept = list(itertools.takewhile(lambda layer: had.get(layer.name) == layer.key, groups))
    need = rebuilt_bytes(last.history(), int(last.attrs.get("Size", 0)), [layer.name for layer in kept])
    free = shutil.disk_usage(root).free
    if needs_more_than_free(need, free):
        raise ImageBuildError(
            f"entry {plan.entry!r}: the build needs about {need / 1e9:.1f} GB and {root} has "
            f"{free / 1e9:.1f} GB free: run `torchyard prune` (`nox -s prune`), then build again"
        )


def _ca_bundle(env: Mapping[str, str]) -> Path | None:
    for candidate in (env.get("SSL_CERT_FILE", ""), *CA_BUNDLES):
        if candidate and Path(candidate).is_file():
            return Path(candidate)
    return None


Origin = Literal["local", "pulled", "cache", "cold", "dependencies"]
ORIGIN_WORDS: dict[Origin, str] = {
    "local": "found on this runner",
    "pulled": "pulled from the registry",
    "cache": "built from cache",
    "cold": "built cold",
    "dependencies": "built on the trusted dependency image",
}
NO_REGISTRY = "--push needs a registry: set TORCHYARD_REGISTRY (host[:port]/path) or [registry] name in machine.toml"
# A dependency layer's step in BuildKit's plain output (`#15 [image  7/17] RUN ... install-layer.sh numeric`);
# `#15 CACHED` means no wheel of that group was downloaded or installed.
LAYER_STEP = re.compile(r"^(#\d+) \[[^\]]*\] RUN .*install-layer\.sh (\w+)\s*$", re.MULTILINE)
# A layer pulled from the registry's cache (BuildKit names the blob it fetches).
PULLING = re.compile(r"^#\d+ pulling sha256:", re.MULTILINE)
# A dependency layer in the image's history (with its size).
LAYER_HISTORY = re.compile(r"install-layer\.sh (\w+)(?: # buildkit)?$")
LAYERS_LABEL = "dev.torchyard.layers"
LayerHow = Literal["reused", "pulled", "built"]


@dataclass(frozen=True)
class LayerOutcome:
    """One dependency layer of a build: its group, how many packages, its size and where it came from."""

    group: str
    packages: int
    size_bytes: int
    how: LayerHow


@dataclass(frozen=True)
class Built:
    entry: str
    tag: str
    size_bytes: int
    seconds: float
    origin: Origin
    pushed: tuple[Transfer, ...] = ()
    pulled: Transfer | None = None
    layers: tuple[LayerOutcome, ...] = ()

    @property
    def reused(self) -> bool:
        return self.origin in {"local", "pulled"}


def layer_steps(output: str) -> dict[str, bool]:
    """Per dependency group that BuildKit's plain output shows: whether its layer was CACHED."""
    return {
        group: re.search(rf"(?m)^{re.escape(step)} CACHED$", output) is not None
        for step, group in LAYER_STEP.findall(output)
    }


def how_built(output: str) -> Origin:
    """Whether any dependency layer came from a cache, local or the registry's ("cache"), or every one was
    built ("cold"), read from BuildKit's plain output."""
    return "cache" if any(layer_steps(output).values()) else "cold"


def layer_sizes(history: Sequence[Mapping[str, object]]) -> dict[str, int]:
    """Each dependency layer's size, from the image's history (`docker history`)."""
    sizes = {}
    for item in history:
        match = LAYER_HISTORY.search(str(item.get("CreatedBy", "")))
        if match:
            sizes[match[1]] = int(str(item.get("Size", 0)))
    return sizes


def layer_outcomes(
    layers: Sequence[Layer],
    output: str,
    sizes: Mapping[str, int],
    local_keys: frozenset[str],
    *,
    stood_on: bool = False,
) -> tuple[LayerOutcome, ...]:
    """Per non-empty group: built (its step ran), reused (cached, and this runner had it: an image of its
    carries its key, or nothing came from the registry; or the build stood on a dependency image) or
    pulled (cached from the registry's layers)."""
    steps = layer_steps(output)
    from_registry = PULLING.search(output) is not None
    outcomes = []
    for layer in layers:
        if not layer.pins:
            continue
        how: LayerHow = "reused" if stood_on else "built"
        if steps.get(layer.name, False):
            how = "reused" if layer.key in local_keys or not from_registry else "pulled"
        outcomes.append(LayerOutcome(layer.name, len(layer.pins), sizes.get(layer.name, 0), how))
    return tuple(outcomes)


def local_layer_keys(client: docker.DockerClient) -> frozenset[str]:
    """The dependency layers this runner's torchyard images hold, by key (their label)."""
    keys: set[str] = set()
    for image in client.images.list(filters={"label": LAYERS_LABEL}):
        keys.update(read_keys_label((image.labels or {}).get(LAYERS_LABEL, "")).values())
    return frozenset(keys)


def cache_sources(plan: BuildPlan, options: BuildOptions, registry: Registry | None, local_alias: bool) -> BuildOptions:
    """Where the build may take layers from: what the caller named, else this runner's last trusted image of
    the entry and the registry's (its layer cache travels inline with it). Never an untrusted alias: one pull
    request's layers would feed the next one's build."""
    if options.cache_from:
        return options
    trusted_alias = trusted_alias_of(plan)
    sources = [trusted_alias] if local_alias else []
    if registry is not None:
        sources.append(registry.ref(trusted_alias))
    return BuildOptions(options.push, tuple(sources), options.cache_to)


def publish(
    client: docker.DockerClient, registry: Registry | None, image: Image, plan: BuildPlan, env: Mapping[str, str]
) -> tuple[Transfer, ...]:
    """Push the content-addressed tag and the entry's alias to the machine's registry."""
    if registry is None:
        raise ImageBuildError(NO_REGISTRY)
    transfers = []
    for local in (plan.tag, plan.alias):
        repository, _, tag = registry.ref(local).rpartition(":")
        image.tag(repository, tag)
        transfers.append(push(client, registry, registry.ref(local), env))
    return tuple(transfers)


def run_build(
    entry: Entry,
    plan: BuildPlan,
    args: Sequence[str],
    *,
    cli: DockerCli,
    registry: Registry | None,
    runner: proc.Runner,
    env: Mapping[str, str],
) -> subprocess.CompletedProcess[str]:
    """One builder run; a failure is one line, cause first."""
    try:
        with client_environment(registry, cli.build_env(env)) as build_env:
            return runner(args, env=build_env, tee=True)
    except CommandError as error:
        raise ImageBuildError(explain_build_failure(entry, plan, error)) from None


def trusted_dependencies(client: docker.DockerClient, plan: BuildPlan) -> tuple[str, str] | None:
    """The dependency image a trusted build of `plan`'s pins tagged on this runner (its tag and ID), if any."""
    image = _local_image(client, plan.dependency_tag) if plan.dependency_tag else None
    return (plan.dependency_tag, str(image.id)) if image is not None else None


def reuse_image(
    entry: Entry,
    plan: BuildPlan,
    client: docker.DockerClient,
    *,
    options: BuildOptions = NO_OPTIONS,
    registry: Registry | None = None,
    env: Mapping[str, str] = os.environ,
    policy: BuildPolicy = TRUSTED,
) -> Built | None:
    """`plan`'s image when this runner has it, or pulled from the registry by its content-addressed tag;
    None when it would have to be built. An untrusted run uses a trusted image as it is, and moves no tag
    of it (the alias a trusted build reads stays where trusted builds put it)."""
    started = time.monotonic()
    existing = _local_image(client, plan.tag)
    origin: Origin = "local"
    pulled = None
    if existing is None and registry is not None:
        pulled = pull(client, registry, registry.ref(plan.tag), env)
        if pulled is not None:
            existing = client.images.get(registry.ref(plan.tag))
            existing.tag(plan.tag)
            origin = "pulled"
    if existing is None:
        return None
    if policy.trusted:
        existing.tag(plan.alias)
    pushed = publish(client, registry, existing, plan, env) if options.push else ()
    seconds = time.monotonic() - started
    return Built(entry.name, plan.tag, existing.attrs["Size"], seconds, origin, pushed, pulled)


def build_image(
    entry: Entry,
    plan: BuildPlan,
    client: docker.DockerClient,
    cli: DockerCli,
    *,
    options: BuildOptions = NO_OPTIONS,
    registry: Registry | None = None,
    policy: BuildPolicy = TRUSTED,
    sources: Sequence[Source],
    runner: proc.Runner = proc.run,
    env: Mapping[str, str] = os.environ,
) -> Built:
    """Reuse `plan`'s image when this runner has it, else pull it from the registry by its
    content-addressed tag, else build it (taking layers from the registry's cache, installing from `sources`:
    the entry's indexes as this machine reaches them); `--push` publishes it. The base is checked before the
    first layer (the caller has checked the lock)."""
    started = time.monotonic()
    reused = reuse_image(entry, plan, client, options=options, registry=registry, env=env, policy=policy)
    if reused is not None:
        return reused
    check_entry(entry, policy)
    check_base(client, plan)
    check_free_disk(client, plan)
    options = cache_sources(plan, options, registry, _local_image(client, trusted_alias_of(plan)) is not None)
    local_keys = local_layer_keys(client)
    if not policy.trusted:
        sources = without_credentials(sources)
    with (
        tempfile.TemporaryDirectory(prefix="torchyard-build-") as scratch,
        served(sources, bridge_address(client.networks)) as (reachable, host_network),
    ):
        if host_network and not policy.trusted:
            raise ImageBuildError(
                f"entry {entry.name!r}: an untrusted build never gets the host's network, and this machine's local "
                "wheel folders are served on loopback only (the engine's default bridge is not an address here)"
            )
        context = Path(scratch) / "context"
        stage_context(plan, context)
        iidfile = Path(scratch) / "iid"
        (Path(scratch) / "index-args").write_text(" ".join(index_args(reachable)) + "\n")  # `read` wants the newline
        secrets = {"uv-index-args": Path(scratch) / "index-args"}
        ca_bundle = _ca_bundle(env)
        if ca_bundle is not None:
            secrets["cacert"] = ca_bundle

        def builder(iid: Path, target: str | None = None) -> tuple[str, ...]:
            return docker_build_args(
                plan, cli, context=context, iidfile=iid, secrets=secrets, host_network=host_network,
                options=options, target=target,
            )  # fmt: skip

        if plan.project_root is not None:
            toolchain = Path(scratch) / "toolchain-iid"
            run_build(entry, plan, builder(toolchain, "toolchain"), cli=cli, registry=registry, runner=runner, env=env)
            build_wheel_sealed(
                entry.name, plan.project_files, context / "project", requires=plan.build_requires,
                image=toolchain.read_text().strip(), docker_path=cli.path, sources=reachable,
                host_network=host_network, ca_bundle=ca_bundle, runner=runner, env=env,
            )  # fmt: skip
        args = builder(iidfile)
        print(f"building {plan.tag} for entry {entry.name!r} from {plan.base_image}", file=sys.stderr, flush=True)
        completed = run_build(entry, plan, args, cli=cli, registry=registry, runner=runner, env=env)
        image_id = iidfile.read_text().strip() if iidfile.exists() else ""
        checks = ACCELERATORS[entry.accelerator.name].IMAGE_CHECKS
        check_image(
            entry.name, image_id, checks, name=f"torchyard-{entry.name}-{os.urandom(4).hex()}",
            user=run_user(os.getuid(), os.getgid()), docker_path=cli.path, runner=runner, env=env,
        )  # fmt: skip
        if plan.project_root is not None:  # the toolchain stage's untagged image: its layers stay in the image
            with contextlib.suppress(docker.errors.APIError):
                client.images.remove(toolchain.read_text().strip())
        if policy.trusted and plan.dependency_tag and _local_image(client, plan.dependency_tag) is None:
            # The dependencies stage again, every layer cached: tagged, an untrusted build stands on it.
            dependencies = Path(scratch) / "dependencies-iid"
            tagging = builder(dependencies, "dependencies")
            run_build(entry, plan, tagging, cli=cli, registry=None, runner=runner, env=env)
            client.images.get(dependencies.read_text().strip()).tag(plan.dependency_tag)
    image = client.images.get(image_id)
    image.tag(plan.tag)
    image.tag(plan.alias)
    output = completed.stdout or ""
    sizes = layer_sizes(image.history())
    layers = layer_outcomes(plan.layers, output, sizes, local_keys, stood_on=bool(plan.stands_on))
    pushed = publish(client, registry, image, plan, env) if options.push else ()
    seconds = time.monotonic() - started
    origin: Origin = "dependencies" if plan.stands_on else how_built(output)
    return Built(entry.name, plan.tag, image.attrs["Size"], seconds, origin, pushed, layers=layers)


def build_summary(rows: Sequence[Built]) -> list[tuple[str, str, str, str, str]]:
    """Per entry: its image, size, seconds and where the image came from (a miss says built cold or from cache)."""
    table = []
    for row in rows:
        origin = ORIGIN_WORDS[row.origin]
        if row.pulled is not None:
            origin += f" ({row.pulled.bytes / 1e6:.0f} MB in {row.pulled.layers} layers)"
        if row.pushed:
            origin += ", pushed"
        table.append((row.entry, row.tag, f"{row.size_bytes / 1e9:.2f} GB", f"{row.seconds:.1f}", origin))
    return table


def layers_summary(rows: Sequence[Built]) -> list[tuple[str, str, str, str, str]]:
    """Per built image and dependency layer: its group, packages, size, and whether it was reused, pulled or
    built (an image found or pulled whole has no rows: every layer came with it)."""
    return [
        (row.entry, layer.group, str(layer.packages), f"{layer.size_bytes / 1e6:.1f} MB", layer.how)
        for row in rows
        for layer in row.layers
    ]
