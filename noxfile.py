"""torchyard's sessions: thin wrappers over `torchyard` commands and the project's own checks."""

from __future__ import annotations

import nox

nox.options.default_venv_backend = "uv"
nox.options.error_on_missing_interpreters = False
nox.options.sessions = ["lint", "tests"]

PYPROJECT = nox.project.load_toml("pyproject.toml")


def _entry_args(posargs: list[str]) -> list[str]:
    """`-- cpu cuda --flag` -> `--entry cpu --entry cuda --flag`: entries are named positionally."""
    return [arg for item in posargs for arg in ((item,) if item.startswith("-") else ("--entry", item))]


@nox.session
def tests(session: nox.Session) -> None:
    """Unit tests: no Docker, no network, no torch. Extra arguments go to pytest."""
    session.install("-e", ".", *nox.project.dependency_groups(PYPROJECT, "test"))
    session.run("pytest", "tests/unit", "-n", "auto", *session.posargs)


@nox.session
def integration(session: nox.Session) -> None:
    """Integration tests: real uv against PyPI, a real Docker engine. Extra arguments go to pytest."""
    session.install("-e", ".", *nox.project.dependency_groups(PYPROJECT, "test"))
    session.run("pytest", "tests/integration", "-m", "integration", *session.posargs)


@nox.session
def lint(session: nox.Session) -> None:
    """ruff (lint and format check) and mypy --strict."""
    session.install("-e", ".", *nox.project.dependency_groups(PYPROJECT, "lint"))
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
    session.run("mypy", "src", "tests/unit", "tests/integration", "noxfile.py")


@nox.session
def matrix(session: nox.Session) -> None:
    """Print the plan, or the GitHub Actions matrix JSON with `-- --github`."""
    session.install("-e", ".")
    if "--github" in session.posargs:
        session.run("torchyard", "matrix", *session.posargs, silent=False)
    else:
        session.run("torchyard", "plan", *session.posargs)


@nox.session
def lock(session: nox.Session) -> None:
    """Lock entries with the pinned uv: `nox -s lock [-- ENTRY ...]`; `-- --check` checks offline."""
    session.install("-e", ".", *nox.project.dependency_groups(PYPROJECT, "lock"))
    session.run("torchyard", "lock", *_entry_args(session.posargs))
