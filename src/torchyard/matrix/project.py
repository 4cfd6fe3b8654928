"""The project under test: an entry's `project`, a package read from its own pyproject.toml or a source folder.

A package's dependencies (plus the chosen extras and dependency groups) join the entry's lock, so a change to
them makes the lock stale; the package itself is built into a wheel and installed after the dependency
layer. Only static metadata can be locked: `dynamic = ["dependencies"]` is refused with the reason. A source
folder (a repository of modules and scripts with no package, such as karpathy/nanoGPT) has no metadata: what
it needs comes from its requirements files, which either kind may name and which join the lock the same way.
A requirements file is the pull request's, read on the host: it may hold requirements and `-r` includes
inside the checkout, never an option that would choose an index or a file to install.
"""

from __future__ import annotations

import difflib
import posixpath
import re
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from torchyard.errors import ConfigError, UsageError
from torchyard.matrix.reader import Table, describe
from torchyard.matrix.schema import Project
from torchyard.matrix.values import checkout_path
from torchyard.util.checkout import read_checkout_file

# What a source folder is told when it is taken for a package.
SOURCE_HINT = 'a folder of modules with no package: `project = { source = "." }`'
INCLUDE = re.compile(r"(?:-r|--requirement)\s*=?\s*(?P<path>\S+)")
# A comment runs from a `#` at the start of a line or after whitespace (pip's rule: a URL's fragment stays).
COMMENT = re.compile(r"(?:^|\s+)#.*$")
# Why each option a requirements file may hold for pip is not taken from one a pull request writes.
REFUSED_OPTIONS = {
    ("-i", "--index-url", "--extra-index-url", "-f", "--find-links", "--no-index", "--trusted-host"): (
        "the indexes come from matrix.toml's [indexes] and the machine's mirrors, never a requirements file"
    ),
    ("-e", "--editable"): "the project itself is `project`; its requirements are names to lock",
    ("-c", "--constraint"): "constraints are not taken: pin in the requirements, or in the entry's requirements",
    ("--hash",): "a file with hashes is a lock of its own: name the file it was compiled from (requirements.in)",
}


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
            f"{path}: no such file (an entry's `project` is a package's folder, with a pyproject.toml; {SOURCE_HINT})"
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


def _refused_option(line: str) -> str:
    """Why the option `line` starts with is not taken."""
    option = line.split("=", 1)[0].split(maxsplit=1)[0]
    for options, why in REFUSED_OPTIONS.items():
        if option in options or any(option.startswith(name) and len(name) == 2 for name in options):
            return why
    return "a requirements file here holds requirements and `-r` includes only"


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """Each line with its number, continuations (a trailing backslash) joined as pip joins them, comments
    dropped."""
    lines: list[tuple[int, str]] = []
    pending, start = "", 0
    for number, raw in enumerate(text.splitlines(), start=1):
        if not pending:
            start = number
        if raw.endswith("\\"):
            pending += raw[:-1]
            continue
        line = COMMENT.sub("", pending + raw).strip()
        pending = ""
        if line:
            lines.append((start, line))
    if pending.strip():
        lines.append((start, COMMENT.sub("", pending).strip()))
    return lines


def read_requirements(folder: Path, relative: str, seen: tuple[str, ...] = ()) -> tuple[str, ...]:
    """The requirements of the file `relative` (a path inside `folder`, the checkout, already checked: reached
    through no link), with those of its `-r` includes (relative to it, inside `folder` and reached through no
    link too). Each line must be a PEP 508 requirement; every mistake is a `ConfigError` naming file and line."""
    if relative in seen:
        raise ConfigError(f"{seen[-1]}: includes {relative} again ({' -> '.join([*seen, relative])})")
    try:
        data = read_checkout_file(folder / relative, "requirements file")
        text = data.decode("utf-8")
    except UsageError as error:
        raise ConfigError(str(error)) from None
    except UnicodeDecodeError:
        raise ConfigError(f"{relative}: not UTF-8 text") from None
    requirements: list[str] = []
    for number, line in _logical_lines(text):
        where = f"{relative}:{number}"
        include = INCLUDE.fullmatch(line)
        if include is not None:
            target = posixpath.normpath(posixpath.join(posixpath.dirname(relative), include["path"]))
            checkout_path(Table({}, where), "-r", folder, target)
            requirements += read_requirements(folder, target, (*seen, relative))
        elif line.startswith("-"):
            raise ConfigError(f"{where}: {describe(line)} is an option, not a requirement: {_refused_option(line)}")
        else:
            try:
                requirement = Requirement(line)
            except InvalidRequirement as error:
                hint = f" ({_refused_option('--hash')})" if "--hash" in line else ""
                reason = str(error).splitlines()[0]
                raise ConfigError(f"{where}: not a PEP 508 requirement: {describe(line)} ({reason}){hint}") from None
            requirements.append(str(requirement))  # as packaging writes it: spacing is no change to the lock
    return tuple(requirements)


def load_source(root: Path, requirements: Sequence[str]) -> Project:
    """A source folder: no metadata to read; what it needs is what its requirements files list."""
    name = canonicalize_name(root.name) or "source"
    return Project(root, name, (), (), tuple(dict.fromkeys(requirements)), kind="source")


def load_project(
    root: Path, extras: Sequence[str], groups: Sequence[str], tests: Sequence[str], listed: Sequence[str] = ()
) -> Project:
    """Read `root/pyproject.toml`; every mistake is a `ConfigError` naming the file and key. `listed` are
    the requirements of the entry's requirements files, locked with the rest."""
    pyproject = root / "pyproject.toml"
    data = read_pyproject(pyproject)
    file = str(pyproject)
    table = data.get("project")
    if not isinstance(table, dict) or not isinstance(table.get("name"), str):
        raise ConfigError(f"{file}: [project] with a name is required (PEP 621); {SOURCE_HINT}")
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
    locked = [line for line in requirements if _requirement_name(line, file) != name]
    locked += [line for line in listed if canonicalize_name(Requirement(line).name) != name]
    for test_path in tests:
        if not (root / test_path).exists():
            raise ConfigError(f"{file}: the entry's tests path {test_path!r} does not exist under {root}")
    return Project(
        root=root, name=name, extras=tuple(extras), groups=tuple(groups), requirements=tuple(dict.fromkeys(locked))
    )
