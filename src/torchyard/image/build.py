"""Build an entry's image with BuildKit from its plan: stage the context, build, tag only on success.

The build writes an image ID file and only then is the image tagged: an interrupted build leaves no tag
pointing at a half-built image. The CA bundle and the index arguments (which may carry credentials) are
BuildKit secrets, never in a layer or the history.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import docker
import docker.errors

from torchyard.accelerators import ACCELERATORS
from torchyard.errors import CommandError, ImageBuildError
from torchyard.host.engine import DockerCli
from torchyard.image.buildkit import StepLines, explain_build_failure, failed_step_output
from torchyard.image.check import check_image
from torchyard.image.held import Held
from torchyard.image.outcome import Built, Origin, how_built, layer_outcomes
from torchyard.image.plan import NO_OPTIONS, BuildOptions, BuildPlan, trusted_alias_of
from torchyard.image.policy import TRUSTED, BuildPolicy, build_sources
from torchyard.image.preflight import check_base, check_free_disk
from torchyard.image.registry import client_environment
from torchyard.image.serve import bridge_address, served
from torchyard.image.source import write_files
from torchyard.image.wheel import build_wheel_sealed
from torchyard.matrix.machine import Registry, Source, index_args
from torchyard.matrix.schema import Entry
from torchyard.seal import run_user
from torchyard.util import proc

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


def _ca_bundle(env: Mapping[str, str]) -> Path | None:
    for candidate in (env.get("SSL_CERT_FILE", ""), *CA_BUNDLES):
        if candidate and Path(candidate).is_file():
            return Path(candidate)
    return None


def build_secrets(
    scratch: Path, reachable: Sequence[Source], env: Mapping[str, str]
) -> tuple[dict[str, Path], Path | None]:
    """The index arguments (which may carry credentials) and the CA bundle, as BuildKit secrets; and the bundle."""
    (scratch / "index-args").write_text(" ".join(index_args(reachable)) + "\n")  # `read` wants the newline
    secrets = {"uv-index-args": scratch / "index-args"}
    ca_bundle = _ca_bundle(env)
    if ca_bundle is not None:
        secrets["cacert"] = ca_bundle
    return secrets, ca_bundle


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
            return runner(args, env=build_env, tee=StepLines())
    except CommandError as error:
        sys.stderr.write(proc.redact(failed_step_output(error.output)))  # its lines were not shown as it ran
        raise ImageBuildError(explain_build_failure(entry, plan, error)) from None


def build_image(
    entry: Entry,
    plan: BuildPlan,
    client: docker.DockerClient,
    cli: DockerCli,
    *,
    held: Held,
    options: BuildOptions = NO_OPTIONS,
    registry: Registry | None = None,
    policy: BuildPolicy = TRUSTED,
    sources: Sequence[Source],
    runner: proc.Runner = proc.run,
    env: Mapping[str, str] = os.environ,
) -> Built:
    """Build `plan`'s image (taking layers from the registry's cache, installing from `sources`: the entry's
    indexes as this machine reaches them) on an engine that holds `held`. The base is checked before the
    first layer (the caller has checked the lock and looked for the image: `image.obtain`)."""
    started = time.monotonic()
    options = cache_sources(plan, options, registry, held.trusted_alias)
    sources = build_sources(entry, policy, sources)
    check_base(client, plan, held)
    check_free_disk(plan, held)
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
        secrets, ca_bundle = build_secrets(Path(scratch), reachable, env)

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
        if policy.trusted and plan.dependency_tag and not held.dependency:
            # The dependencies stage again, every layer cached: tagged, an untrusted build stands on it.
            dependencies = Path(scratch) / "dependencies-iid"
            tagging = builder(dependencies, "dependencies")
            run_build(entry, plan, tagging, cli=cli, registry=None, runner=runner, env=env)
            client.images.get(dependencies.read_text().strip()).tag(plan.dependency_tag)
    image = client.images.get(image_id)
    image.tag(plan.tag)
    image.tag(plan.alias)
    output = completed.stdout or ""
    layers = layer_outcomes(plan.layers, output, image.history(), held.layer_keys, stood_on=bool(plan.stands_on))
    origin: Origin = "dependencies" if plan.stands_on else how_built(output)
    seconds = time.monotonic() - started
    return Built(entry.name, plan.tag, image.attrs["Size"], seconds, origin, layers=layers, alias=plan.alias)
