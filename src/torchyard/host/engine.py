"""The Docker engine and the client that builds with BuildKit.

The engine is reached through the Docker SDK (ping, inspect, volumes). Builds need a CLI with BuildKit:
`docker buildx build` where the buildx plugin exists, else a pre-23 client's `DOCKER_BUILDKIT=1 docker
build` (the engine's built-in BuildKit). A newer client without buildx refuses BuildKit builds, so
every `docker` on PATH is tried in order; `TORCHYARD_DOCKER` picks one explicitly.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import docker
import docker.errors

from torchyard.errors import CommandNotFoundError, DockerUnavailableError
from torchyard.util import proc

START_HINT = "start one (`sudo systemctl start docker`, or `sudo dockerd &`)"


@dataclass(frozen=True)
class DockerCli:
    path: str
    version: str
    builder: Literal["buildx", "buildkit"]

    def build_command(self) -> tuple[str, ...]:
        return (self.path, "buildx", "build") if self.builder == "buildx" else (self.path, "build")

    def build_env(self, env: Mapping[str, str]) -> dict[str, str]:
        return {**env, "DOCKER_BUILDKIT": "1"}


def engine(env: Mapping[str, str] = os.environ) -> docker.DockerClient:
    """A connected SDK client, or one line saying no engine answers and how to start one."""
    try:
        client = docker.DockerClient.from_env(environment=dict(env))
        client.ping()
    except docker.errors.DockerException as error:
        where = env.get("DOCKER_HOST", "unix:///var/run/docker.sock")
        reason = str(error).split("(")[0].strip().rstrip(":")
        raise DockerUnavailableError(f"no Docker engine answers at {where} ({reason}): {START_HINT}") from None
    return client


def _candidates(env: Mapping[str, str]) -> list[str]:
    if env.get("TORCHYARD_DOCKER"):
        return [env["TORCHYARD_DOCKER"]]
    found: dict[Path, str] = {}  # by resolved path: a symlink and its target are one client
    for folder in env.get("PATH", "").split(os.pathsep):
        path = Path(folder) / "docker"
        if path.is_file() and os.access(path, os.X_OK):
            found.setdefault(path.resolve(), str(path))
    return list(found.values())


def build_client(env: Mapping[str, str] = os.environ, runner: proc.Runner = proc.run) -> DockerCli:
    """The first docker CLI that can build with BuildKit."""
    tried = []
    for path in _candidates(env):
        if runner([path, "buildx", "version"], capture=True, check=False, env=env).returncode == 0:
            version = runner([path, "version", "--format", "{{.Client.Version}}"], capture=True, check=False, env=env)
            return DockerCli(path, version.stdout.strip(), "buildx")
        version = runner([path, "version", "--format", "{{.Client.Version}}"], capture=True, check=False, env=env)
        client_version = version.stdout.strip().splitlines()[0] if version.stdout.strip() else "unknown"
        major = client_version.split(".")[0]
        if major.isdigit() and int(major) < 23:
            return DockerCli(path, client_version, "buildkit")
        tried.append(f"{path} ({client_version}, no buildx)")
    if not tried and shutil.which("docker", path=env.get("PATH")) is None:
        raise CommandNotFoundError("docker: command not found; install Docker (`sudo apt-get install docker.io`)")
    raise DockerUnavailableError(
        "no docker client can build with BuildKit: "
        + ", ".join(tried)
        + "; install the buildx plugin (docker-buildx) or set TORCHYARD_DOCKER to a client older than 23"
    )
