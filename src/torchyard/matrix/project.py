"""The project under test: an entry's `project` read from the project's own pyproject.toml.

Its dependencies (plus the chosen extras and dependency groups) join the entry's lock, so a change to
them makes the lock stale; the project itself is built into a wheel and installed after the dependency
layer. Only static metadata can be locked: `dynamic = ["dependencies"]` is refused with the reason.
"""

from __future__ import annotations

import difflib
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from torchyard.errors import ConfigError
from torchyard.matrix.schema import Project


def _requirement_name(line: str, file: str) -> str:
    try:
        return canonicalize_name(Requirement(line).name)
    except InvalidRequirement:
        raise ConfigError(f"{file}: not a PEP 508 requirement: {line!r}") from None


def read_pyproject(path: Path) -> dict[str, Any]:
    """The project's pyproject.toml, never read through a link (the pull request commits it)."""
    if path.is_symlink():
        raise ConfigError(f"{path}: is a symbolic link; a project's pyproject.toml is a file it holds")
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(
            f"{path}: no such file (an entry's `project` must be a folder with a pyproject.toml)"
        ) from None
    except IsADirectoryError:
        raise ConfigError(f"{path}: is a folder, expected a file") from None
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as error:
        raise ConfigError(f"{path}: cannot read: {error}") from None


def _strings(value: object, where: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise ConfigError(f"{where}: expected an array of strings")
    return list(value)


def _group(groups: Mapping[str, Any], name: str, file: str, seen: tuple[str, ...] = ()) -> list[str]:
    """A PEP 735 dependency group with its `{include-group = ...}` items expanded."""
    if name in seen:
        raise ConfigError(f"{file}: dependency-groups > {name}: includes itself ({' -> '.join([*seen, name])})")
    if name not in groups:
        close = difflib.get_close_matches(name, list(groups), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else f" (groups: {', '.join(groups) or 'none'})"
        raise ConfigError(f"{file}: no dependency group {name!r}{hint}")
    items = groups[name]
    if not isinstance(items, list):
        raise ConfigError(f"{file}: dependency-groups > {name}: expected an array")
    lines: list[str] = []
    for position, item in enumerate(items):
        if isinstance(item, str):
            lines.append(item)
        elif isinstance(item, dict) and set(item) == {"include-group"} and isinstance(item["include-group"], str):
            lines += _group(groups, item["include-group"], file, (*seen, name))
        else:
            raise ConfigError(
                f"{file}: dependency-groups > {name}[{position}]: expected a requirement or include-group"
            )
    return lines


def load_project(root: Path, extras: Sequence[str], groups: Sequence[str], tests: Sequence[str]) -> Project:
    """Read `root/pyproject.toml`; every mistake is a `ConfigError` naming the file and key."""
    pyproject = root / "pyproject.toml"
    data = read_pyproject(pyproject)
    file = str(pyproject)
    table = data.get("project")
    if not isinstance(table, dict) or not isinstance(table.get("name"), str):
        raise ConfigError(f"{file}: [project] with a name is required (PEP 621)")
    if "dependencies" in table.get("dynamic", []):
        raise ConfigError(f"{file}: project.dynamic lists dependencies: torchyard locks static dependencies only")
    name = canonicalize_name(table["name"])
    requirements = _strings(table.get("dependencies", []), f"{file}: project.dependencies")
    optional = table.get("optional-dependencies", {})
    for extra in extras:
        if extra not in optional:
            close = difflib.get_close_matches(extra, list(optional), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else f" (extras: {', '.join(optional) or 'none'})"
            raise ConfigError(f"{file}: no optional dependency group (extra) {extra!r}{hint}")
        requirements += _strings(optional[extra], f"{file}: project.optional-dependencies.{extra}")
    for group in groups:
        requirements += _group(data.get("dependency-groups", {}), group, file)
    # An extra or group that names the project itself (`mypkg[test]`) is the project: it is installed
    # from source, so only its other requirements are locked.
    locked = tuple(dict.fromkeys(line for line in requirements if _requirement_name(line, file) != name))
    for test_path in tests:
        if not (root / test_path).exists():
            raise ConfigError(f"{file}: the entry's tests path {test_path!r} does not exist under {root}")
    return Project(root=root, name=name, extras=tuple(extras), groups=tuple(groups), requirements=locked)
