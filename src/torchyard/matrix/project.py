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

import ast
import difflib
import posixpath
import re
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import canonicalize_name

from torchyard.errors import ConfigError, UsageError
from torchyard.matrix.reader import Table
from torchyard.matrix.schema import Project, ProjectKind
from torchyard.matrix.values import checkout_path
from torchyard.names import BACKEND_DISTRIBUTIONS
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


def read_requirements(
    folder: Path, relative: str, seen: tuple[str, ...] = (), *, left: list[str] | None = None
) -> tuple[str, ...]:
    """The requirements of the file `relative` (a path inside `folder`, the checkout, already checked: reached
    through no link), with those of its `-r` includes (relative to it, inside `folder` and reached through no
    link too). Each line must be a PEP 508 requirement; every mistake is a `ConfigError` naming file and line,
    the line whole. Given `left` (what `torchyard init` reads of a research repository), a line that is not a
    requirement to lock (a `git+` URL, an editable, an option) is said there, whole and with why, and left out."""
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
            requirements += read_requirements(folder, target, (*seen, relative), left=left)
        elif line.startswith("-"):
            problem = f"{where}: {line!r} is an option, not a requirement: {_refused_option(line)}"
            if left is None:
                raise ConfigError(problem)
            left.append(problem)
        else:
            try:
                requirement = Requirement(line)
            except InvalidRequirement as error:
                hint = f" ({_refused_option('--hash')})" if "--hash" in line else ""
                reason = str(error).splitlines()[0]
                problem = f"{where}: not a PEP 508 requirement: {line!r} ({reason}){hint}"
                if left is None:
                    raise ConfigError(problem) from None
                left.append(problem)
                continue
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


PYTHONS = ("3.11", "3.12", "3.13")
# A source folder's requirements file, where it has one; and the folder's Python (the cpu base's: bookworm's).
REQUIREMENTS_FILE = "requirements.txt"
SETUP_PY = "setup.py"
SOURCE_PYTHON = PYTHONS[0]
TEST_GROUPS = (frozenset({"test", "tests", "testing"}), frozenset({"dev"}))
TEST_FOLDERS = ("tests", "test")


def test_paths(root: Path) -> tuple[str, ...]:
    """Where the project's tests are: its tests folder, else the files at its root that pytest collects by its
    default names (`test_*.py`, `*_test.py`: a research repository's `test_all.py`)."""
    folder = next((name for name in TEST_FOLDERS if (root / name).is_dir() and not (root / name).is_symlink()), None)
    if folder is not None:
        return (folder,)
    return tuple(
        sorted(
            path.name
            for path in root.glob("*.py")
            if (path.name.startswith("test_") or path.name.endswith("_test.py")) and path.is_file()
            and not path.is_symlink()
        )
    )  # fmt: skip


@dataclass(frozen=True)
class Adopter:
    """What `torchyard init` reads of an adopter's project: its pyproject.toml (or, for a source folder, its
    requirements.txt or setup.py) and where its tests are (`test_paths`)."""

    name: str
    python: str
    torch: str
    tests: tuple[str, ...]  # a tests folder, or the test files at its root where it has none
    extras: tuple[str, ...]  # its test dependencies, as the pyproject spells the names (the loader looks them up so)
    groups: tuple[str, ...]
    own_cases: bool  # a `torchyard.cases` entry point
    kind: ProjectKind = "package"
    requirements_file: str | None = None  # a source folder's, where it has one
    left_out: tuple[str, ...] = ()  # test extras and groups not taken, each with why
    # A source folder's setup.py (no requirements.txt): its literal install_requires, None where it has none; or
    # what init could read of a requirements.txt it cannot take whole (`listed_from` says which).
    setup_requirements: tuple[str, ...] | None = None
    setup_file: bool = False
    listed_from: str = SETUP_PY
    left_lines: tuple[str, ...] = ()  # the lines of `listed_from` init left out, each whole with why


def _python(project: Mapping[str, object], file: str) -> str:
    specifier = project.get("requires-python", "")
    try:
        allowed = SpecifierSet(str(specifier))
    except InvalidSpecifier:
        raise ConfigError(f"{file}: project.requires-python: not a version specifier: {specifier!r}") from None
    for version in PYTHONS:
        if allowed.contains(f"{version}.0") or allowed.contains(f"{version}.99"):
            return version
    raise ConfigError(f"{file}: project.requires-python {specifier!r} allows none of {', '.join(PYTHONS)}")


def _torch(lines: Sequence[object], where: str) -> str:
    for line in lines:
        try:
            requirement = Requirement(str(line))
        except InvalidRequirement:
            raise ConfigError(f"{where}: not a PEP 508 requirement: {line!r}") from None
        if canonicalize_name(requirement.name) == "torch":
            return f'"torch{requirement.specifier}"'
    return '"torch"'


def _names(table: object) -> list[str]:
    return [str(name) for name in table] if isinstance(table, dict) else []


# What an entry's stack decides: torch, its domain libraries and every backend's distributions.
STACK = frozenset(canonicalize_name(name) for name in ("torch", "torchvision", "torchaudio", *BACKEND_DISTRIBUTIONS))


def _stack_pin(requirements: object) -> str | None:
    """The first requirement of a list that pins a distribution of the stack to one version."""
    for text in requirements if isinstance(requirements, list) else []:
        if not isinstance(text, str):
            continue  # a dependency group's {include-group = ...}
        try:
            requirement = Requirement(text)
        except InvalidRequirement:
            continue
        exact = any(spec.operator in ("==", "===") and "*" not in spec.version for spec in requirement.specifier)
        if exact and canonicalize_name(requirement.name) in STACK:
            return text
    return None


def _is_setup(node: ast.Call) -> bool:
    """A call of `setup(...)` or `setuptools.setup(...)`, not of some other object's `setup` method."""
    function = node.func
    if isinstance(function, ast.Name):
        return function.id == "setup"
    return isinstance(function, ast.Attribute) and function.attr == "setup" and _dotted(function.value) == "setuptools"


def _dotted(node: ast.expr) -> str:
    return node.id if isinstance(node, ast.Name) else ""


def setup_py_requirements(root: Path) -> tuple[str, ...] | None:
    """The `install_requires` of a setup.py's `setup(...)` where it is a literal list of strings (the file is
    parsed, never run; a call that lists them wins over one that does not); () where the call has none; None
    where there is no setup.py or no such literal."""
    path = root / SETUP_PY
    if not (path.exists() or path.is_symlink()):
        return None
    try:
        tree = ast.parse(read_checkout_file(path, "setup.py").decode("utf-8"))
    except (UsageError, UnicodeDecodeError, SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    calls = [node for node in ast.walk(tree) if isinstance(node, ast.Call) and _is_setup(node)]
    given = next((word.value for call in calls for word in call.keywords if word.arg == "install_requires"), None)
    if given is None:
        return () if calls else None
    try:
        value = ast.literal_eval(given)
    except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):  # not a literal, or an unhashable one
        return None
    listed = isinstance(value, list | tuple) and all(isinstance(item, str) for item in value)
    return tuple(item.strip() for item in value if item.strip()) if listed else None


def read_source(root: Path) -> Adopter:
    """A repository with no package: its folder's name, the cpu base's Python, torch as its requirements.txt
    names it (read as the loader reads it: inside the checkout, through no link, requirements only); with no
    requirements.txt, what a setup.py's `setup()` lists as install_requires (a setup.py package's metadata is
    not static, and the host never runs it: its modules are taken as a source folder)."""
    listed = root / REQUIREMENTS_FILE
    present = listed.exists() or listed.is_symlink()
    left: list[str] = []
    requirements = read_requirements(root, REQUIREMENTS_FILE, left=left) if present else ()
    if left:  # the file cannot be locked as it is: what init could read goes in the entry's requirements
        return _source(root, requirements, REQUIREMENTS_FILE, tuple(left))
    setup = None if present else setup_py_requirements(root)
    for line in setup or ():
        _torch([line], f"{SETUP_PY}: install_requires")  # each one a PEP 508 requirement, or one line
    torch = _torch(requirements or setup or (), REQUIREMENTS_FILE if present else f"{SETUP_PY}: install_requires")
    tests = test_paths(root)
    setup_file = (root / SETUP_PY).exists() and not present
    return Adopter(
        root.name, SOURCE_PYTHON, torch, tests, (), (), False, "source", REQUIREMENTS_FILE if present else None,
        setup_requirements=setup if setup_file else None, setup_file=setup_file,
    )  # fmt: skip


def _source(root: Path, requirements: tuple[str, ...], listed_from: str, left: tuple[str, ...]) -> Adopter:
    """A source folder whose requirements init lists in the entry itself (`listed_from`'s), with what it left."""
    torch = _torch(requirements, listed_from)
    return Adopter(
        root.name, SOURCE_PYTHON, torch, test_paths(root), (), (), False, "source", None,
        setup_requirements=requirements, listed_from=listed_from, left_lines=left,
    )  # fmt: skip


def read_adopter(root: Path) -> Adopter:
    """The project at `root`; its test dependencies are looked for only where it has a tests folder. Without
    a pyproject.toml `[project]` (none, or one of tool settings only) it is a source folder."""
    file = str(root / "pyproject.toml")
    pyproject = root / "pyproject.toml"
    data = read_pyproject(pyproject) if pyproject.exists() or pyproject.is_symlink() else {}
    if "project" not in data:
        return read_source(root)
    project = data.get("project")
    if not isinstance(project, dict) or not isinstance(project.get("name"), str):
        raise ConfigError(f"{file}: [project] with a name is required (PEP 621)")
    tests = test_paths(root)
    extras: tuple[str, ...] = ()
    groups: tuple[str, ...] = ()
    optional: dict[str, Any] = project.get("optional-dependencies") or {}
    grouped: dict[str, Any] = data.get("dependency-groups") or {}
    left_out: tuple[str, ...] = ()
    for wanted in TEST_GROUPS if tests else ():
        extras = tuple(n for n in _names(optional) if canonicalize_name(n) in wanted)
        groups = tuple(n for n in _names(grouped) if canonicalize_name(n) in wanted)
        # One that pins the stack (torch==2.4.0, say) cannot lock beside the entry's own: left out, and said.
        pins = {("extra", n): _stack_pin(optional[n]) for n in extras}
        pins |= {("dependency group", n): _stack_pin(grouped[n]) for n in groups}
        left_out += tuple(f"{kind} {name!r} pins {pin}" for (kind, name), pin in pins.items() if pin)
        extras = tuple(n for n in extras if not pins[("extra", n)])
        groups = tuple(n for n in groups if not pins[("dependency group", n)])
        if extras or groups:
            break
    points: Any = project.get("entry-points")
    own_cases = isinstance(points, dict) and bool(points.get("torchyard.cases"))
    torch = _torch(project.get("dependencies", []) or [], f"{file}: project.dependencies")
    return Adopter(project["name"], _python(project, file), torch, tests, extras, groups, own_cases, left_out=left_out)
