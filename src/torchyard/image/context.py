"""What goes into a build context, decided without copying anything: torchyard's in-image files (read
from the installed package with importlib.resources, never from the current directory) and the project's
source (`torchyard.image.source`: what git tracks and does not ignore, minus `.dockerignore`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence
from importlib.resources import files
from importlib.resources.abc import Traversable
from pathlib import Path

import pathspec

from torchyard.contract import INIMAGE_MODULES
from torchyard.image.source import ProjectFile, read_project
from torchyard.util import proc

# Never part of a project's context, whatever git tracks or .dockerignore says.
ALWAYS_IGNORED = (".git/", ".torchyard/", ".nox/", ".venv/", "venv/", "reports/", "__pycache__/", "*.pyc")

ContextFiles = tuple[tuple[str, Traversable], ...]


def _walk(node: Traversable, prefix: str) -> Iterator[tuple[str, Traversable]]:
    if node.is_file():
        yield prefix, node
        return
    for child in sorted(node.iterdir(), key=lambda item: item.name):
        if child.name == "__pycache__" or child.name.endswith(".pyc"):
            continue
        yield from _walk(child, f"{prefix}/{child.name}")


def inimage_files() -> ContextFiles:
    """torchyard's files the image (and a venv run) needs, as `torchyard/<path>` under the package root."""
    package = files("torchyard")
    found: list[tuple[str, Traversable]] = []
    for module in INIMAGE_MODULES:
        node = package
        for part in module.split("/"):
            node = node.joinpath(part)
        found.extend(_walk(node, f"torchyard/{module}"))
    return tuple(found)


def _dockerignore(files: Sequence[ProjectFile]) -> pathspec.GitIgnoreSpec:
    """The project's `.dockerignore` (anchored at the root, as Docker reads it) plus what never belongs;
    read from the project's files, so a `.dockerignore` that is a link is no `.dockerignore`."""
    lines = list(ALWAYS_IGNORED)
    ignore = next((item for item in files if item.path == ".dockerignore" and item.mode != "link"), None)
    if ignore is not None:
        for raw in ignore.data.decode("utf-8", errors="replace").splitlines():
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            negate = line.startswith("!")
            pattern = line.removeprefix("!").removeprefix("./")
            anchored = pattern if pattern.startswith(("/", "**")) else "/" + pattern
            lines.append(("!" if negate else "") + anchored)
    return pathspec.GitIgnoreSpec.from_lines(lines)


def project_files(root: Path, git: proc.DataRunner = proc.data) -> tuple[ProjectFile, ...]:
    """The project's source: what git tracks and does not ignore (or, outside git, every file), minus
    `.dockerignore`, read without following a link (`torchyard.image.source`)."""
    files = read_project(root, git)
    spec = _dockerignore(files)
    return tuple(item for item in files if not spec.match_file(item.path))


def select(files: Sequence[ProjectFile], prefixes: Sequence[str]) -> tuple[ProjectFile, ...]:
    """The files under any of `prefixes` (a file or a folder, relative to the project root)."""
    cleaned = [prefix.strip("/") for prefix in prefixes]
    return tuple(
        item for item in files if any(item.path == prefix or item.path.startswith(prefix + "/") for prefix in cleaned)
    )


def files_digest(pairs: Sequence[tuple[str, bytes]]) -> str:
    digest = hashlib.sha256()
    for name, data in pairs:
        digest.update(name.encode() + b"\0" + hashlib.sha256(data).digest())
    return digest.hexdigest()


def project_digest(files: Sequence[ProjectFile]) -> str:
    """`files_digest` with each file's mode: a link and a file of the same text are different sources."""
    return files_digest([(f"{item.mode}:{item.path}", item.data) for item in files])
