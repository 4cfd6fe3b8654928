"""What goes into a build context, decided without copying anything: torchyard's in-image files (read
from the installed package with importlib.resources, never from the current directory) and the project's
source (the files git tracks, minus `.dockerignore`), each as (path in the context, bytes source).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence
from importlib.resources import files
from importlib.resources.abc import Traversable
from pathlib import Path

import pathspec

from torchyard.errors import CommandError, CommandNotFoundError
from torchyard.util import proc

# The in-image side and the stdlib-only modules it shares with the host (tests/unit/test_layout.py
# checks that the in-image side imports nothing else of torchyard).
INIMAGE_MODULES = (
    "__init__.py",
    "names.py",
    "contract.py",
    "cases.py",
    "util/__init__.py",
    "util/atomic.py",
    "util/markdown.py",
    "inimage",
)
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


def _dockerignore(root: Path) -> pathspec.GitIgnoreSpec:
    """The project's `.dockerignore` (anchored at the root, as Docker reads it) plus what never belongs."""
    lines = list(ALWAYS_IGNORED)
    ignore = root / ".dockerignore"
    if ignore.is_file():
        for raw in ignore.read_text(encoding="utf-8", errors="replace").splitlines():
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            negate = line.startswith("!")
            pattern = line.removeprefix("!").removeprefix("./")
            anchored = pattern if pattern.startswith(("/", "**")) else "/" + pattern
            lines.append(("!" if negate else "") + anchored)
    return pathspec.GitIgnoreSpec.from_lines(lines)


def _tracked(root: Path, runner: proc.Runner) -> list[str] | None:
    """The files git tracks under `root`, and new ones it does not ignore (None outside a git work tree)."""
    try:
        listed = runner(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard", "."], cwd=root, capture=True
        )
    except (CommandError, CommandNotFoundError):
        return None
    return sorted(name for name in listed.stdout.split("\0") if name)


def project_files(root: Path, runner: proc.Runner = proc.run) -> tuple[str, ...]:
    """The project's source: what git tracks (or, outside git, every file), minus `.dockerignore`."""
    names = _tracked(root, runner)
    if names is None:
        names = sorted(str(path.relative_to(root)) for path in root.rglob("*") if path.is_file())
    spec = _dockerignore(root)
    return tuple(name for name in names if (root / name).is_file() and not spec.match_file(name))


def select(names: Sequence[str], prefixes: Sequence[str]) -> tuple[str, ...]:
    """The names under any of `prefixes` (a file or a folder, relative to the project root)."""
    cleaned = [prefix.strip("/") for prefix in prefixes]
    return tuple(name for name in names if any(name == prefix or name.startswith(prefix + "/") for prefix in cleaned))


def files_digest(pairs: Sequence[tuple[str, bytes]]) -> str:
    digest = hashlib.sha256()
    for name, data in pairs:
        digest.update(name.encode() + b"\0" + hashlib.sha256(data).digest())
    return digest.hexdigest()
