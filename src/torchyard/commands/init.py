"""`torchyard init`: make a project a torchyard project: matrix.toml (a `cpu` entry from the project's
requires-python, torch requirement, test dependencies and cases), a noxfile with torchyard's sessions, a GitHub
workflow that installs torchyard as GitHub's runners can, and a `.gitignore` block for what runs leave behind.
A repository with no package (no pyproject.toml `[project]`: modules and scripts) gets a source-folder entry,
with its requirements.txt where it has one.

It never overwrites a file: when any exists it writes nothing and names them (`--force` replaces them). The
`.gitignore` is the one file it edits in place: it appends the patterns the file lacks, so a second run adds none.
"""

from __future__ import annotations

import ast
import datetime as dt
import json
import os
import shutil
import sys
import sysconfig
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import metadata
from importlib.resources import files
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import canonicalize_name

from torchyard import __version__
from torchyard.errors import ConfigError, UsageError
from torchyard.lock.pairs import pairs
from torchyard.matrix.project import read_pyproject, read_requirements
from torchyard.matrix.schema import ProjectKind
from torchyard.names import BACKEND_DISTRIBUTIONS
from torchyard.util.atomic import write_atomically
from torchyard.util.checkout import read_checkout_file

PYTHONS = ("3.11", "3.12", "3.13")
# A source folder's requirements file, where it has one; and the folder's Python (the cpu base's: bookworm's).
REQUIREMENTS_FILE = "requirements.txt"
SETUP_PY = "setup.py"
SOURCE_PYTHON = PYTHONS[0]
PROJECT_COMMENTS: dict[ProjectKind, str] = {
    "package": "# This project, built from its source into every image; its dependencies (and the extras and groups "
    "named\n# here) join the lock.\n",
    "source": "# This repository's modules (no package: no pyproject.toml [project]): its files are the image's "
    "/workspace,\n# importable as its own scripts import them; its requirements files join the lock.\n",
}
# Where a module of cases would be: in the package, or beside the source folder's own modules.
CASES_MODULES: dict[ProjectKind, str] = {"package": "yourpackage.torchyard_cases", "source": "torchyard_cases"}
TARGETS = {
    "matrix.toml": "matrix.toml",
    "noxfile.py": "noxfile.py",
    ".github/workflows/torchyard.yml": "torchyard.yml",
}
WORKFLOW = ".github/workflows/torchyard.yml"
NEXT_STEPS = (
    "@NOX@ -s lock        # lock the cpu entry (uv, hashed) into lockfiles/cpu.txt",
    "@NOX@ -s test-cpu    # image from the lock, your tests and torchyard's suites in it, reports/cpu/",
    f"git add .gitignore matrix.toml noxfile.py lockfiles {WORKFLOW}",
)
SPEC_EXAMPLES = "torchyard==VERSION from an index, or 'torchyard @ git+https://github.com/OWNER/torchyard@COMMIT'"
# Extras and PEP 735 groups that hold a project's test dependencies: the test-named ones, else `dev`.
TEST_GROUPS = (frozenset({"test", "tests", "testing"}), frozenset({"dev"}))
GITIGNORE = ".gitignore"
GITIGNORE_HEADER = "# torchyard's runs: local venvs and caches (gigabytes), reports, nox's venvs\n"
# Anchored at the project's root: a package's own `reports/` folder deeper down stays tracked.
IGNORED = ("/.torchyard/", "/reports/", "/.nox/")
CORPUS_COST = "# torchyard's built-in corpus: 14 small models of its own through every suite, about 280 s a CPU run.\n"
BUILTIN_OFF = (
    CORPUS_COST
    + "# Off: your cases (your torchyard.cases entry point) test your code; `true` tests torch's stack too.\n"
    "builtin-cases = false\n"
)
BUILTIN_ON = (
    CORPUS_COST
    + "# On while you have no cases of your own (a suite with no case fails the run): `false` once you do.\n"
    "builtin-cases = true\n"
)


def nox_command(env: Mapping[str, str]) -> str:
    """`nox` where the nox on PATH is the one installed with this torchyard (it can import
    `torchyard.nox`), else `torchyard nox` (a tool install: only `torchyard` is on PATH)."""
    found = shutil.which("nox", path=env.get("PATH", os.defpath))
    beside = {Path(sys.executable).parent, Path(sysconfig.get_path("scripts"))}
    return "nox" if found is not None and Path(found).parent in beside else "torchyard nox"


def runner_spec(direct_url: str | None, version: str) -> tuple[str, str]:
    """What the workflow's runners install, from how this torchyard was installed (PEP 610's
    direct_url.json; None where it came from an index): `(requirement, "")`, or `("", where)` when it came
    from a place GitHub's runners cannot reach (a local wheel or folder, an editable checkout, ssh)."""
    if direct_url is None:
        return f"torchyard=={version}", ""
    try:
        data = json.loads(direct_url)
    except ValueError:
        return "", "a place its direct_url.json does not say"
    url = str(data.get("url", "")) if isinstance(data, dict) else ""
    if urlsplit(url).scheme not in ("https", "http"):
        return "", url or "a place its direct_url.json does not say"
    vcs = data.get("vcs_info")
    if isinstance(vcs, dict):
        spec = f"torchyard @ {vcs.get('vcs', 'git')}+{url}"
        spec += f"@{vcs['commit_id']}" if vcs.get("commit_id") else ""
    else:
        spec = f"torchyard @ {url}"
        hashes = (data.get("archive_info") or {}).get("hashes") or {}
        sha256 = hashes.get("sha256") if isinstance(hashes, dict) else None
        spec += f"#sha256={sha256}" if sha256 else ""
    if data.get("subdirectory"):
        spec += ("&" if "#" in spec else "#") + f"subdirectory={data['subdirectory']}"
    return spec, ""


def installed_spec() -> tuple[str, str]:
    """`runner_spec` for this torchyard."""
    try:
        direct = metadata.distribution("torchyard").read_text("direct_url.json")
    except metadata.PackageNotFoundError:
        direct = None
    return runner_spec(direct, __version__)


def user_spec(text: str) -> str:
    """`--torchyard-spec`: a requirement for torchyard, or a URL (`git+https://...@COMMIT`) taken as one."""
    spec = text.strip()
    if "://" in spec and not spec.lower().startswith("torchyard"):
        spec = f"torchyard @ {spec}"
    try:
        named: str = canonicalize_name(Requirement(spec).name)
    except InvalidRequirement:
        named = ""
    if named != "torchyard" or "${{" in spec:  # the workflow would evaluate an expression
        raise UsageError(f"--torchyard-spec: expected a requirement for torchyard ({SPEC_EXAMPLES}), got {text!r}")
    return spec


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


def executorch_comment(torch: str) -> str:
    """What the template says of ExecuTorch: the release built for the newest torch series the entry's torch
    requirement (`"torch..."`, as the template writes it) allows, from torchyard's table of pairs."""
    specifier = Requirement(json.loads(torch)).specifier
    allowed = sorted(
        ((tuple(int(part) for part in pair[0].split(".")), release) for release, pair in pairs().items()),
        reverse=True,
    )
    for torch_series, release in allowed:
        series_text = ".".join(str(part) for part in torch_series)
        if specifier.contains(f"{series_text}.0", prereleases=True):
            return (
                "# ExecuTorch's runtime suite needs ExecuTorch in requirements, the release built for your torch:\n"
                f'# "executorch=={release}.*" for torch {series_text}, the newest torch your requirement allows in\n'
                f'# torchyard\'s table of pairs; with it, "torch=={series_text}.*" in place of the torch above\n'
                "# (the lock takes the newest torch it may; `torchyard lock` and every image build refuse a pair\n"
                "# it knows is wrong)."
            )
    return (
        "# ExecuTorch's runtime suite needs ExecuTorch in requirements, the release built for your torch (torchyard's\n"
        "# table of pairs knows none for this one; `torchyard lock` refuses a pair it knows to be wrong)."
    )


def _names(table: object) -> list[str]:
    return [str(name) for name in table] if isinstance(table, dict) else []


@dataclass(frozen=True)
class Adopter:
    """What init reads from the project: its pyproject.toml (or, for a source folder, its requirements.txt) and
    whether it has a tests folder."""

    name: str
    python: str
    torch: str
    tests: bool
    extras: tuple[str, ...]  # its test dependencies, as the pyproject spells the names (the loader looks them up so)
    groups: tuple[str, ...]
    own_cases: bool  # a `torchyard.cases` entry point
    kind: ProjectKind = "package"
    requirements_file: str | None = None  # a source folder's, where it has one
    left_out: tuple[str, ...] = ()  # test extras and groups not taken, each with why
    # A source folder's setup.py (no requirements.txt): its literal install_requires, None where it has none.
    setup_requirements: tuple[str, ...] | None = None
    setup_file: bool = False

    @property
    def requirements_value(self) -> str:
        """The entry's first requirements, inside the template's list: torch, and a setup.py's others."""
        others = [
            line for line in self.setup_requirements or () if canonicalize_name(Requirement(line).name) != "torch"
        ]
        if not others:
            return self.torch
        comment = f"# {SETUP_PY}'s install_requires, as init read it (it never runs setup.py)"
        return "\n    ".join(
            [comment, f"{self.torch},", *(f"{json.dumps(line, ensure_ascii=False)}," for line in others)]
        ).removesuffix(",")

    @property
    def project_value(self) -> str:
        """matrix.toml's `project`: the folder, with the extras and groups its tests need; or the source folder,
        with its requirements file."""
        if self.kind == "source":
            listed = f', requirements-files = ["{self.requirements_file}"]' if self.requirements_file else ""
            return '{ source = "."' + listed + " }"
        if not (self.extras or self.groups):
            return '"."'
        keys = [("extras", self.extras), ("groups", self.groups)]
        return "{ " + ", ".join(['path = "."', *(f"{key} = {json.dumps(list(v))}" for key, v in keys if v)]) + " }"

    @property
    def source_line(self) -> str:
        """For a source folder, one line on what init took it for, and what the lock takes."""
        beyond = "what your modules import beyond torch goes in the cpu entry's requirements"
        if self.requirements_file:
            taken = f"{self.requirements_file} joins its lock"
        elif self.setup_requirements:
            taken = f"{SETUP_PY}'s install_requires ({', '.join(self.setup_requirements)}) is in its requirements"
        elif self.setup_file:
            said = "lists none" if self.setup_requirements == () else "is not a literal list init can read"
            taken = f"{SETUP_PY}'s install_requires {said}: {beyond}"
        else:
            taken = f"no {REQUIREMENTS_FILE}: {beyond}"
        package = f"; {SETUP_PY} is never run on the host" if self.setup_file else ""
        return (
            f"matrix.toml: no package here (no pyproject.toml [project]{package}): the cpu entry takes this folder's "
            f"modules as a source folder, with Python {self.python}; {taken}"
        )

    @property
    def test_dependencies(self) -> str:
        """One line on what the entry's lock takes for the tests, or what to add."""
        if self.kind == "source":
            beyond = self.requirements_file or "torch"
            return f"matrix.toml: what tests/ imports beyond {beyond} and pytest goes in the cpu entry's requirements"
        left = (
            f"; left out: {'; '.join(self.left_out)} (the entry's stack decides those; what else your tests need "
            "goes in the cpu entry's requirements)"
            if self.left_out
            else ""
        )
        if self.extras or self.groups:
            taken = [f"extra {name!r}" for name in self.extras] + [f"dependency group {name!r}" for name in self.groups]
            return f"matrix.toml: the cpu entry locks your tests' dependencies too ({', '.join(taken)}){left}"
        if self.left_out:
            return f"matrix.toml: no test dependencies taken{left}"
        return (
            "matrix.toml: no test dependencies in pyproject.toml (an extra or dependency group named test, tests, "
            "testing or dev): what tests/ imports beyond your dependencies and pytest goes in the cpu entry's "
            "requirements"
        )


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
    requirements = read_requirements(root, REQUIREMENTS_FILE) if present else ()
    setup = None if present else setup_py_requirements(root)
    for line in setup or ():
        _torch([line], f"{SETUP_PY}: install_requires")  # each one a PEP 508 requirement, or one line
    torch = _torch(requirements or setup or (), REQUIREMENTS_FILE if present else f"{SETUP_PY}: install_requires")
    tests = (root / "tests").is_dir()
    setup_file = (root / SETUP_PY).exists() and not present
    return Adopter(
        root.name, SOURCE_PYTHON, torch, tests, (), (), False, "source", REQUIREMENTS_FILE if present else None,
        setup_requirements=setup if setup_file else None, setup_file=setup_file,
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
    tests = (root / "tests").is_dir()
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


def render(root: Path, today: dt.date, spec: str) -> dict[str, str]:
    """The files to write, by path relative to `root` (pure apart from reading the project's pyproject);
    `spec` is the workflow's install line ("" leaves it for the user, and the workflow refuses to start)."""
    facts = read_adopter(root)
    values = {
        "@PROJECT@": facts.name,
        "@TODAY@": today.isoformat(),
        "@PYTHON@": facts.python,
        "@TORCH@": facts.requirements_value,
        "@EXECUTORCH@": executorch_comment(facts.torch),
        "@PROJECT_COMMENT@": PROJECT_COMMENTS[facts.kind],
        "@PROJECT_VALUE@": facts.project_value,
        "@CASES_MODULE@": CASES_MODULES[facts.kind],
        "@TESTS@": 'tests = ["tests"]\n' if facts.tests else "",
        "@BUILTIN@": BUILTIN_OFF if facts.own_cases else BUILTIN_ON,
        "@SPEC@": json.dumps(spec)[1:-1],  # inside the template's double quotes: JSON's escapes are YAML's too
    }
    rendered = {}
    for target, template in TARGETS.items():
        text = files("torchyard.templates").joinpath(template).read_text(encoding="utf-8")
        for marker, value in values.items():
            text = text.replace(marker, value)
        rendered[target] = text
    return rendered


def gitignore_update(existing: str) -> str | None:
    """`existing` (a .gitignore's text) with a block of the IGNORED patterns it lacks, or None when it lacks
    none. A pattern counts as there however it is anchored, and so does one the file negates (`!/reports/`:
    the user tracks it on purpose)."""
    present = {line.strip().lstrip("!").strip("/") for line in existing.splitlines() if not line.startswith("#")}
    missing = [pattern for pattern in IGNORED if pattern.strip("/") not in present]
    if not missing:
        return None
    block = GITIGNORE_HEADER + "".join(f"{pattern}\n" for pattern in missing)
    if not existing.strip():
        return block
    return existing + ("" if existing.endswith("\n") else "\n") + "\n" + block


def _read_gitignore(path: Path) -> str:
    if path.is_symlink():
        raise ConfigError(f"{path}: is a symbolic link; init edits only a file the checkout holds")
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return ""
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigError(f"{path}: cannot read: {error}") from None


def init_date(env: Mapping[str, str]) -> dt.date:
    """The day `exclude-newer` starts at: today in UTC, or the day of `SOURCE_DATE_EPOCH` where it is set (the
    reproducible-builds convention), so a scripted `init` writes the same matrix, and so the same locks, every time."""
    epoch = env.get("SOURCE_DATE_EPOCH", "").strip()
    if not epoch:
        return dt.datetime.now(dt.UTC).date()
    try:
        return dt.datetime.fromtimestamp(int(epoch), dt.UTC).date()
    except (ValueError, OverflowError, OSError):
        raise UsageError(f"SOURCE_DATE_EPOCH: expected seconds since 1970 (an integer), got {epoch!r}") from None


def init(
    root: Path,
    *,
    force: bool = False,
    today: dt.date | None = None,
    env: Mapping[str, str] = os.environ,
    spec: str | None = None,
) -> list[Path]:
    """Write the files into `root` and append to its .gitignore; raise `UsageError` naming what exists unless
    `force`. `spec` is how the workflow installs torchyard (`--torchyard-spec`); None: as this one was
    installed, where GitHub's runners can do the same."""
    spec, unreachable = (user_spec(spec), "") if spec is not None else installed_spec()
    rendered = render(root, today or init_date(env), spec)
    existing = [name for name in rendered if (root / name).exists()]
    if existing and not force:
        raise UsageError(f"{', '.join(existing)} already exist: torchyard init never overwrites (--force replaces)")
    gitignore = gitignore_update(_read_gitignore(root / GITIGNORE))
    written = []
    for name, text in rendered.items():
        write_atomically(root / name, text)
        written.append(root / name)
        print(f"wrote {name}", file=sys.stderr)
    if gitignore is not None:
        write_atomically(root / GITIGNORE, gitignore)
        written.append(root / GITIGNORE)
        print(f"wrote {GITIGNORE}: torchyard's block, so runs leave nothing for git to add", file=sys.stderr)
    facts = read_adopter(root)
    if facts.kind == "source":
        print(facts.source_line, file=sys.stderr)
    if facts.tests:
        print(facts.test_dependencies, file=sys.stderr)
    if not spec:
        print(
            f"{WORKFLOW}: TORCHYARD_SPEC left empty: this torchyard came from {unreachable}, which GitHub's runners "
            f"cannot reach; set it ({SPEC_EXAMPLES}) or rerun init with --torchyard-spec, or the workflow stops first",
            file=sys.stderr,
        )
    nox = nox_command(env)
    # On the stream of the lines above, so that a captured log keeps their order.
    print("next:\n" + "".join(f"  {step.replace('@NOX@', nox)}\n" for step in NEXT_STEPS), end="", file=sys.stderr)
    return written
