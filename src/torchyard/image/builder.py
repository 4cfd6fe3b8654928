"""One BuildKit run: the builder's argument list, the context it reads, its secrets (the index arguments, which
may carry credentials, and the CA bundle: never in a layer or the history) and the client's environment (the
registry's credentials in a private Docker config); a failure is one line, cause first."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

from torchyard.errors import CommandError, ImageBuildError
from torchyard.host.engine import DockerCli
from torchyard.image.buildkit import StepLines, explain_build_failure, failed_step_output
from torchyard.image.plan import BuildOptions, BuildPlan, trusted_alias_of
from torchyard.image.source import write_files
from torchyard.matrix.machine import Registry, Source, write_index_args
from torchyard.matrix.schema import Entry
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
    secrets = {"uv-index-args": write_index_args(scratch / "index-args", reachable)}
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


@contextmanager
def client_environment(registry: Registry | None, env: Mapping[str, str]) -> Iterator[dict[str, str]]:
    """`env` for the build client: with credentials from the environment, a private Docker config
    holding only them (mode 0600, removed afterwards), so BuildKit pulls the base and the cache with
    them; otherwise `env` as it is (Docker's own store)."""
    if registry is None or registry.auth is None:
        yield dict(env)
        return
    token = base64.b64encode(f"{registry.auth['username']}:{registry.auth['password']}".encode()).decode()
    with tempfile.TemporaryDirectory(prefix="torchyard-docker-config-") as folder:
        config = Path(folder) / "config.json"
        descriptor = os.open(config, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "w") as handle:
            json.dump({"auths": {registry.host: {"auth": token}}}, handle)
        yield {**env, "DOCKER_CONFIG": folder}


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
