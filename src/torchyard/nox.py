"""torchyard's standard nox sessions, for any project: `import torchyard.nox; torchyard.nox.register()` in its
noxfile gives `lock`, `matrix`, `doctor`, `base-image`, `refresh`, `prune`, `report` and, per accelerator,
`build-<acc>-image` and `test-<acc>`. Each session calls the `torchyard` command of the environment nox runs
in; `register(install=[...])` gives each session its own venv with those pip arguments installed (torchyard's
own repository uses `install=["-e", "."]`). Imports only nox and the stdlib, so a noxfile can import it first.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import nox

from torchyard.names import ACCELERATOR_NAMES

SessionBody = Callable[[nox.Session], None]


def _torchyard(session: nox.Session, install: Sequence[str], *args: str) -> None:
    if install:
        session.install(*install)
        session.run("torchyard", *args)
        return
    # The environment nox runs in: its interpreter, with its bin/ (uv, docker's helpers) first on PATH. `-P`: the
    # working folder (a checkout) is not put first on sys.path, so no `torchyard/` committed there is imported.
    bindir = str(Path(sys.executable).parent)
    session.run(
        sys.executable, "-P", "-m", "torchyard", *args, external=True,
        env={"PATH": bindir + os.pathsep + os.environ["PATH"]},
    )  # fmt: skip


def _session(name: str, doc: str, install: Sequence[str], body: Callable[[nox.Session, Sequence[str]], None]) -> None:
    def session_function(session: nox.Session) -> None:
        body(session, install)

    session_function.__doc__ = doc
    session_function.__name__ = name.replace("-", "_")
    backend = None if install else "none"
    nox.session(name=name, venv_backend=backend)(session_function)


def register(*, install: Sequence[str] = ()) -> None:
    """Register the standard sessions (see the module docstring)."""

    def lock(session: nox.Session, install: Sequence[str]) -> None:
        _torchyard(session, install, "lock", *session.posargs)

    def matrix(session: nox.Session, install: Sequence[str]) -> None:
        command = "matrix" if "--github" in session.posargs else "plan"
        _torchyard(session, install, command, *session.posargs)

    def doctor(session: nox.Session, install: Sequence[str]) -> None:
        _torchyard(session, install, "doctor", *session.posargs)

    def base(session: nox.Session, install: Sequence[str]) -> None:
        _torchyard(session, install, "base", *session.posargs)

    def refresh(session: nox.Session, install: Sequence[str]) -> None:
        _torchyard(session, install, "refresh", *session.posargs)

    def prune(session: nox.Session, install: Sequence[str]) -> None:
        _torchyard(session, install, "prune", *session.posargs)

    def report(session: nox.Session, install: Sequence[str]) -> None:
        _torchyard(session, install, "report", *session.posargs)

    _session("lock", "Lock entries: `-- [ENTRY ...]`; `-- --check` checks offline.", install, lock)
    _session("matrix", "The plan as a table; `-- --github` prints the GitHub Actions matrix JSON.", install, matrix)
    _session("doctor", "What this host offers each accelerator: `-- --accelerator cuda`.", install, doctor)
    base_help = "Bootstrap the local Debian base image (mmdebstrap or debootstrap, then docker import)."
    _session("base-image", base_help, install, base)
    _session("refresh", "Move base-image digests and exclude-newer in matrix.toml, for review.", install, refresh)
    _session(
        "prune",
        "Remove this project's stopped containers, images beyond the newest 2 per entry (`-- --keep N`), "
        "untagged images, the cache volumes of an entry with no image left; `-- --all-projects`: every project's, "
        "and build cache beyond `--keep-storage 10g`; `-- --dry-run` says what would go.",
        install,
        prune,
    )
    _session(
        "report",
        "Several runs' parity.json as one compatibility table: `-- [PATH ...] [--markdown FILE] [--html FILE]` "
        "(default: every run under reports/).",
        install,
        report,
    )
    for accelerator in ACCELERATOR_NAMES:

        def build(session: nox.Session, install: Sequence[str], accelerator: str = accelerator) -> None:
            _torchyard(session, install, "build", "--accelerator", accelerator, *session.posargs)

        def test(session: nox.Session, install: Sequence[str], accelerator: str = accelerator) -> None:
            _torchyard(session, install, "test", "--accelerator", accelerator, *session.posargs)

        _session(
            f"build-{accelerator}-image",
            f"The {accelerator} entries' images: reused, pulled from the machine's registry, or built; "
            "`-- [ENTRY ...] [--push] [--cache-from REF] [--cache-to REF]` (see `torchyard build`).",
            install,
            build,
        )
        _session(
            f"test-{accelerator}",
            f"Per {accelerator} entry: lock check, image (built if missing), suites in a sealed container, "
            "reports back; exits with the suites' status. `-- [ENTRY ...] [--local | --in-place] [--suite NAME] "
            "[--reuse-results] [--trust LEVEL] [--unsandboxed] [-- PYTEST ARGS]` (see `torchyard test`).",
            install,
            test,
        )
