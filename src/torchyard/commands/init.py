"""`torchyard init`: make a project a torchyard project: matrix.toml (a `cpu` entry from the project's
requires-python, torch requirement, test dependencies and cases), a noxfile with torchyard's sessions, a GitHub
workflow that installs torchyard as GitHub's runners can, and a `.gitignore` block for what runs leave behind.
A repository with no package (no pyproject.toml `[project]`: modules and scripts) gets a source-folder entry,
with its requirements.txt where it has one.

It never overwrites a file: when any exists it writes nothing and names them (`--force` replaces them). The
`.gitignore` is the one file it edits in place: it appends the patterns the file lacks, so a second run adds none.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import shutil
import sys
import sysconfig
from collections.abc import Mapping
from importlib import metadata
from importlib.resources import files
from pathlib import Path
from urllib.parse import urlsplit

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from torchyard import __version__
from torchyard.errors import ConfigError, UsageError
from torchyard.lock.pairs import pairs
from torchyard.matrix.project import REQUIREMENTS_FILE, SETUP_PY, Adopter, read_adopter
from torchyard.matrix.schema import ProjectKind
from torchyard.util import proc
from torchyard.util.atomic import write_atomically
from torchyard.util.git import head_fact

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


def requirements_value(facts: Adopter) -> str:
    """The entry's first requirements, inside the template's list: torch, and a setup.py's others."""
    others = [line for line in facts.setup_requirements or () if canonicalize_name(Requirement(line).name) != "torch"]
    if not others:
        return facts.torch
    comment = (
        f"# {SETUP_PY}'s install_requires, as init read it (it never runs setup.py)"
        if facts.listed_from == SETUP_PY
        else f"# {facts.listed_from}'s requirements, as init could take them (the lines it left out: init's note)"
    )
    return "\n    ".join(
        [comment, f"{facts.torch},", *(f"{json.dumps(line, ensure_ascii=False)}," for line in others)]
    ).removesuffix(",")


def project_value(facts: Adopter) -> str:
    """matrix.toml's `project`: the folder, with the extras and groups its tests need; or the source folder,
    with its requirements file."""
    if facts.kind == "source":
        listed = f', requirements-files = ["{facts.requirements_file}"]' if facts.requirements_file else ""
        return '{ source = "."' + listed + " }"
    if not (facts.extras or facts.groups):
        return '"."'
    keys = [("extras", facts.extras), ("groups", facts.groups)]
    return "{ " + ", ".join(['path = "."', *(f"{key} = {json.dumps(list(v))}" for key, v in keys if v)]) + " }"


def source_line(facts: Adopter) -> str:
    """For a source folder, one line on what init took it for, and what the lock takes."""
    beyond = "what your modules import beyond torch goes in the cpu entry's requirements"
    if facts.requirements_file:
        taken = f"{facts.requirements_file} joins its lock"
    elif facts.left_lines:
        taken = (
            f"{facts.listed_from}'s requirements init could take are in its requirements; left out, each to add by "
            f"hand as a requirement the lock can take (a release, or `name @ https://...` to a wheel): "
            + "; ".join(facts.left_lines)
        )
    elif facts.setup_requirements:
        taken = f"{SETUP_PY}'s install_requires ({', '.join(facts.setup_requirements)}) is in its requirements"
    elif facts.setup_file:
        said = "lists none" if facts.setup_requirements == () else "is not a literal list init can read"
        taken = f"{SETUP_PY}'s install_requires {said}: {beyond}"
    else:
        taken = f"no {REQUIREMENTS_FILE}: {beyond}"
    package = f"; {SETUP_PY} is never run on the host" if facts.setup_file else ""
    return (
        f"matrix.toml: no package here (no pyproject.toml [project]{package}): the cpu entry takes this folder's "
        f"modules as a source folder, with Python {facts.python}; {taken}"
    )


def test_dependencies(facts: Adopter) -> str:
    """One line on what the entry's lock takes for the tests, or what to add."""
    if facts.kind == "source":
        beyond = facts.requirements_file or "torch"
        return (
            f"matrix.toml: the cpu entry runs {_named(facts.tests)}: what they import beyond {beyond} and pytest goes "
            "in its requirements"
        )
    left = (
        f"; left out: {'; '.join(facts.left_out)} (the entry's stack decides those; what else your tests need "
        "goes in the cpu entry's requirements)"
        if facts.left_out
        else ""
    )
    if facts.extras or facts.groups:
        taken = [f"extra {name!r}" for name in facts.extras] + [f"dependency group {name!r}" for name in facts.groups]
        return f"matrix.toml: the cpu entry locks your tests' dependencies too ({', '.join(taken)}){left}"
    if facts.left_out:
        return f"matrix.toml: no test dependencies taken{left}"
    return (
        "matrix.toml: no test dependencies in pyproject.toml (an extra or dependency group named test, tests, "
        f"testing or dev): what {_named(facts.tests)} import beyond your dependencies and pytest goes in the cpu "
        "entry's requirements"
    )


def _named(tests: tuple[str, ...]) -> str:
    """The project's tests as a line names them: its folder (`tests/`), or its test files."""
    return ", ".join(f"{path}/" if "." not in path else path for path in tests)


DEFAULT_BRANCH = "main"  # where git names none: a new repository's, as GitHub makes it
# A branch name the workflow's filter reads as itself: no glob character (`*`, `?`, `+`, `!`, `[`) or quote.
PLAIN_BRANCH = re.compile(r"[A-Za-z0-9._/-]+")


def default_branch(root: Path, runner: proc.DataRunner = proc.data) -> str:
    """The default branch of the repository holding `root`, as git names it: the remote's HEAD where a clone
    has one, else the branch checked out, else `DEFAULT_BRANCH`; one whose name is not plain is taken as that
    too (the workflow's filter would read it as a pattern)."""
    remote = head_fact(root, ["symbolic-ref", "--quiet", "--short", "refs/remotes/origin/HEAD"], "", runner=runner)
    named = remote.removeprefix("origin/") or head_fact(
        root, ["symbolic-ref", "--quiet", "--short", "HEAD"], "", runner=runner
    )
    return named if PLAIN_BRANCH.fullmatch(named) else DEFAULT_BRANCH


def render(
    root: Path, today: dt.date, spec: str, facts: Adopter | None = None, branch: str = DEFAULT_BRANCH
) -> dict[str, str]:
    """The files to write, by path relative to `root` (pure apart from reading the project, where `facts` is not
    what was read of it already); `spec` is the workflow's install line ("" leaves it for the user, and the
    workflow refuses to start); `branch` the default branch, the only one whose pushes the workflow runs."""
    facts = facts or read_adopter(root)
    values = {
        "@DEFAULT_BRANCH@": branch,
        "@PROJECT@": facts.name,
        "@TODAY@": today.isoformat(),
        "@PYTHON@": facts.python,
        "@TORCH@": requirements_value(facts),
        "@EXECUTORCH@": executorch_comment(facts.torch),
        "@PROJECT_COMMENT@": PROJECT_COMMENTS[facts.kind],
        "@PROJECT_VALUE@": project_value(facts),
        "@CASES_MODULE@": CASES_MODULES[facts.kind],
        "@TESTS@": f"tests = {json.dumps(list(facts.tests))}\n" if facts.tests else "",
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
    facts = read_adopter(root)  # once: what the files say and what init says of the project
    branch = default_branch(root)
    rendered = render(root, today or init_date(env), spec, facts, branch)
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
    print(
        f"{WORKFLOW}: pushes to {branch!r} run it (the default branch: the only one torchyard trusts)", file=sys.stderr
    )
    if facts.kind == "source":
        print(source_line(facts), file=sys.stderr)
    if facts.tests:
        print(test_dependencies(facts), file=sys.stderr)
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
