"""An entry's cases modules, checked against the project's files before any image is built: a misspelled
module of the project's own package stops in one line naming it (and the nearest module the project has),
not after a build, as the image's import error.

Only modules whose top-level package or module the project itself has (at its root or under `src/`) are
checked: one from a dependency, or from a layout the build backend maps elsewhere, is the image's to import.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Sequence

from torchyard.errors import ConfigError

ROOTS = ("", "src/")  # a flat layout, and the src layout


def _modules(paths: Iterable[str], root: str) -> list[str]:
    """The dotted names of the modules under `root`."""
    names = []
    for path in paths:
        if path.startswith(root) and path.endswith(".py"):
            dotted = path[len(root) : -len(".py")].replace("/", ".")
            names.append(dotted.removesuffix(".__init__"))
    return names


def _has(paths: set[str], stem: str) -> bool:
    """Whether `stem` (a module's path without `.py`) is a module, a package, or a namespace package's folder."""
    return f"{stem}.py" in paths or any(path.startswith(f"{stem}/") for path in paths)


def check_case_modules(entry: str, cases: Sequence[str], paths: Iterable[str]) -> None:
    """Each `cases` reference (`pkg.mod` or `pkg.mod:ATTR`) of the project's own packages names a module the
    project has."""
    files = set(paths)
    for reference in cases:
        module = reference.partition(":")[0]
        parts = module.split(".")
        for root in ROOTS:
            if not _has(files, root + parts[0]):
                continue  # not the project's at this root
            stem = root + "/".join(parts)
            if _has(files, stem):
                break
            near = difflib.get_close_matches(module, _modules(files, root), n=1)
            hint = f"; did you mean {near[0]!r}?" if near else ""
            raise ConfigError(
                f"entry {entry!r}: cases module {module!r} is not in the project (no {stem}.py or "
                f"{stem}/__init__.py){hint}"
            )
