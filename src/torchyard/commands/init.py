"""`torchyard init`: make a project a torchyard project: matrix.toml (a `cpu` entry from the project's
requires-python and torch requirement), a noxfile with torchyard's sessions, a GitHub workflow.

It never overwrites a file: when any exists it writes nothing and names them (`--force` replaces them).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import sys
import sysconfig
from collections.abc import Mapping
from importlib import metadata
from importlib.resources import files
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import canonicalize_name

from torchyard import __version__
from torchyard.errors import ConfigError, UsageError
from torchyard.matrix.project import read_pyproject
from torchyard.util.atomic import write_atomically

PYTHONS = ("3.11", "3.12", "3.13")
TARGETS = {
    "matrix.toml": "matrix.toml",
    "noxfile.py": "noxfile.py",
    ".github/workflows/torchyard.yml": "torchyard.yml",
}
NEXT_STEPS = (
    "@NOX@ -s lock        # lock the cpu entry (uv, hashed) into lockfiles/cpu.txt",
    "@NOX@ -s test-cpu    # image from the lock, your tests and torchyard's suites in it, reports/cpu/",
    "git add matrix.toml noxfile.py lockfiles .github/workflows/torchyard.yml",
)


def nox_command(env: Mapping[str, str]) -> str:
    """`nox` where the nox on PATH is the one installed with this torchyard (it can import
    `torchyard.nox`), else `torchyard nox` (a tool install: only `torchyard` is on PATH)."""
    found = shutil.which("nox", path=env.get("PATH", os.defpath))
    beside = {Path(sys.executable).parent, Path(sysconfig.get_path("scripts"))}
    return "nox" if found is not None and Path(found).parent in beside else "torchyard nox"


def install_spec() -> str:
    """How this torchyard was installed (PEP 610 direct URL), for the workflow to install the same."""
    try:
        direct = metadata.distribution("torchyard").read_text("direct_url.json")
    except metadata.PackageNotFoundError:
        direct = None
    if direct:
        data = json.loads(direct)
        url = str(data.get("url", ""))
        vcs = data.get("vcs_info")
        if vcs:
            return f"torchyard @ {vcs['vcs']}+{url}@{vcs.get('commit_id', '')}".rstrip("@")
        if url and not data.get("dir_info", {}).get("editable"):
            return f"torchyard @ {url}"
    return f"torchyard=={__version__}"


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


def _torch(project: Mapping[str, object], file: str) -> str:
    for line in project.get("dependencies", []) or []:  # type: ignore[attr-defined]
        try:
            requirement = Requirement(str(line))
        except InvalidRequirement:
            raise ConfigError(f"{file}: project.dependencies: not a PEP 508 requirement: {line!r}") from None
        if canonicalize_name(requirement.name) == "torch":
            return f'"torch{requirement.specifier}"'
    return '"torch"'


def render(root: Path, today: dt.date, spec: str) -> dict[str, str]:
    """The files to write, by path relative to `root` (pure apart from reading the project's pyproject)."""
    file = str(root / "pyproject.toml")
    data = read_pyproject(root / "pyproject.toml")
    project = data.get("project")
    if not isinstance(project, dict) or not isinstance(project.get("name"), str):
        raise ConfigError(f"{file}: [project] with a name is required (PEP 621)")
    tests = 'tests = ["tests"]\n' if (root / "tests").is_dir() else ""
    values = {
        "@PROJECT@": project["name"],
        "@TODAY@": today.isoformat(),
        "@PYTHON@": _python(project, file),
        "@TORCH@": _torch(project, file),
        "@TESTS@": tests,
        "@SPEC@": spec,
    }
    rendered = {}
    for target, template in TARGETS.items():
        text = files("torchyard.templates").joinpath(template).read_text(encoding="utf-8")
        for marker, value in values.items():
            text = text.replace(marker, value)
        rendered[target] = text
    return rendered


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
    root: Path, *, force: bool = False, today: dt.date | None = None, env: Mapping[str, str] = os.environ
) -> list[Path]:
    """Write the files into `root`; raise `UsageError` naming what exists unless `force`."""
    rendered = render(root, today or init_date(env), install_spec())
    existing = [name for name in rendered if (root / name).exists()]
    if existing and not force:
        raise UsageError(f"{', '.join(existing)} already exist: torchyard init never overwrites (--force replaces)")
    written = []
    for name, text in rendered.items():
        write_atomically(root / name, text)
        written.append(root / name)
        print(f"wrote {name}", file=sys.stderr)
    nox = nox_command(env)
    print("next:\n" + "".join(f"  {step.replace('@NOX@', nox)}\n" for step in NEXT_STEPS), end="")
    return written
