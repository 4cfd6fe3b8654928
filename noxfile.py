"""torchyard's sessions: thin wrappers over `torchyard` commands and the project's own checks."""

from __future__ import annotations

import nox

nox.options.default_venv_backend = "uv"
nox.options.error_on_missing_interpreters = False
nox.options.sessions = ["lint", "tests"]

PYPROJECT = nox.project.load_toml("pyproject.toml")


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
    """ruff (lint and format check), mypy --strict, hadolint on the Dockerfile, actionlint on the workflows."""
    session.install("-e", ".", *nox.project.dependency_groups(PYPROJECT, "lint"))
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
    session.run(
        "mypy", "--exclude", "src/torchyard/(inimage|cases.py)", "src", "tests/unit", "tests/integration", "noxfile.py"
    )
    session.run("hadolint", "src/torchyard/image/Dockerfile")
    session.run("actionlint")


@nox.session(name="lint-stack")
def lint_stack(session: nox.Session) -> None:
    """mypy --strict on the in-image side, against the cpu entry's venv (made by `test-cpu -- --local`)."""
    stack_python = ".torchyard/venvs/cpu/bin/python"
    session.install(*nox.project.dependency_groups(PYPROJECT, "lint"))
    session.run("mypy", "--python-executable", stack_python, "src/torchyard/inimage", "src/torchyard/cases.py")


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
    session.run("torchyard", "lock", *session.posargs)


@nox.session
def doctor(session: nox.Session) -> None:
    """What this host offers each accelerator and the exact `docker run` flags: `-- --accelerator cuda`."""
    session.install("-e", ".")
    session.run("torchyard", "doctor", *session.posargs)


@nox.session
def refresh(session: nox.Session) -> None:
    """Move base-image digests (from the registry) and exclude-newer (to today) in matrix.toml."""
    session.install("-e", ".")
    session.run("torchyard", "refresh", *session.posargs)


@nox.session(name="base-image")
def base_image(session: nox.Session) -> None:
    """Bootstrap the local Debian base image (`torchyard/base:bookworm`) for machines with no registry."""
    session.install("-e", ".")
    session.run("torchyard", "base", *session.posargs)


def _build_session(accelerator: str) -> None:
    @nox.session(name=f"build-{accelerator}-image")
    def session_function(session: nox.Session) -> None:
        session.install("-e", ".", *nox.project.dependency_groups(PYPROJECT, "lock"))
        session.run("torchyard", "build", "--accelerator", accelerator, *session.posargs)

    session_function.__doc__ = f"Build the {accelerator} entries' images: `-- [ENTRY ...] [--push] [--cache-from REF]`."


def _test_session(accelerator: str) -> None:
    @nox.session(name=f"test-{accelerator}")
    def session_function(session: nox.Session) -> None:
        session.install("-e", ".", *nox.project.dependency_groups(PYPROJECT, "lock"))
        session.run("torchyard", "test", "--accelerator", accelerator, *session.posargs)

    session_function.__doc__ = f"Stack suites of the {accelerator} entries: `-- [ENTRY ...] --local [PYTEST ARGS]`."


for _accelerator in ("cpu", "cuda", "rocm", "xpu"):
    _build_session(_accelerator)
    _test_session(_accelerator)
