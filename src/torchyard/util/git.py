"""The one seam through which torchyard runs git: against the checkout's own git dir, never one git finds.

A pull request can commit a folder git takes for a repository (`sub/HEAD`, `sub/objects/`, `sub/refs/`,
`sub/config` with `core.fsmonitor = "<command>"`) and point `project` at it: git started there would
discover it and run the command on the host. So git never discovers anything here. The checkout is found
once, by looking for a `.git` entry (which no commit can carry) at the project folder and above; git then
runs with that `--git-dir` and `--work-tree` named, its working folder the work tree's top, pathspecs
literal and after `--`, no system or global configuration, no variable of the caller's, and every key that
names a program set off on the command line, which wins over the repository's own configuration.
`tests/unit/test_git.py` fails when any other module starts git.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from torchyard.errors import CommandError, CommandNotFoundError
from torchyard.util import proc

# Keys through which git's configuration names a program or a place to load one from; set off for every call.
SAFE_CONFIG: tuple[tuple[str, str], ...] = (
    ("safe.bareRepository", "explicit"),  # never take a folder for a bare repository
    ("core.fsmonitor", "false"),  # the hook route 1 of issue 57 used
    ("core.hooksPath", os.devnull),
    ("core.pager", "cat"),
    ("core.editor", "true"),
    ("core.sshCommand", ""),
    ("core.askPass", ""),
    ("credential.helper", ""),
    ("diff.external", ""),
    ("core.attributesFile", os.devnull),
    ("core.untrackedCache", "false"),
    ("protocol.allow", "never"),  # reads only: nothing is fetched through any transport
)


@dataclass(frozen=True)
class Checkout:
    """A git work tree and its own git dir, both found without asking git."""

    top: Path
    git_dir: Path

    def relative(self, folder: Path) -> str:
        """`folder` as a pathspec from the top (`.` for the top itself)."""
        return Path(os.path.abspath(folder)).relative_to(self.top).as_posix()  # noqa: PTH100 (lexical)


def _git_dir(folder: Path) -> Path | None:
    """The git dir that `folder/.git` names: a real folder, or a `gitdir:` file (a worktree's, a submodule's);
    None where there is none."""
    entry = folder / ".git"
    try:
        info = entry.lstat()
    except OSError:
        return None
    if stat.S_ISDIR(info.st_mode):
        found = entry
    elif stat.S_ISREG(info.st_mode) and info.st_size < 4096:
        text = entry.read_text(errors="replace").strip()
        if not text.startswith("gitdir:"):
            return None
        named = Path(text.removeprefix("gitdir:").strip())
        found = named if named.is_absolute() else folder / named
    else:
        return None  # a link named .git is nobody's checkout
    return found if (found / "HEAD").is_file() and (found / "objects").is_dir() else None


def find_checkout(folder: Path) -> Checkout | None:
    """The checkout holding `folder`: the nearest `.git` at or above it (lexically, no link resolved), or None."""
    absolute = Path(os.path.abspath(folder))  # noqa: PTH100 (lexical: resolving would follow the links)
    for candidate in (absolute, *absolute.parents):
        git_dir = _git_dir(candidate)
        if git_dir is not None:
            return Checkout(candidate, Path(os.path.abspath(git_dir)))  # noqa: PTH100
    return None


def git_command(checkout: Checkout, args: Sequence[str]) -> tuple[str, ...]:
    """The full command line: the git dir and work tree named, literal pathspecs (the program keys are set
    off in `git_environment`, as the command line's own configuration)."""
    return (
        "git", "--no-pager", "--literal-pathspecs", "--no-replace-objects",
        f"--git-dir={checkout.git_dir}", f"--work-tree={checkout.top}", *args,
    )  # fmt: skip


def git_environment(env: Mapping[str, str], drivers: Sequence[str] = ()) -> dict[str, str]:
    """What git sees of the environment: the caller's PATH and locale only (a `GIT_DIR`, `GIT_CONFIG_*` or
    `GIT_EXEC_PATH` of the caller's would otherwise steer it), no system or global configuration, and no
    optional lock (reading never rewrites the index). `SAFE_CONFIG` goes in as `GIT_CONFIG_COUNT` pairs,
    which git ranks with `-c`: above the repository's own configuration. So are the filter `drivers` the
    repository's configuration defines (git-lfs's, written by a checkout with LFS): the pull request's
    `.gitattributes` picks which one a file goes through, and a read of git's must run none."""
    kept = {key: env[key] for key in ("PATH", "LANG", "LC_ALL") if key in env}
    settings = [
        *SAFE_CONFIG,
        *((f"filter.{name}.{part}", "") for name in drivers for part in ("clean", "smudge", "process")),
        *((f"filter.{name}.required", "false") for name in drivers),
    ]
    config = {
        **{f"GIT_CONFIG_KEY_{index}": key for index, (key, _) in enumerate(settings)},
        **{f"GIT_CONFIG_VALUE_{index}": value for index, (_, value) in enumerate(settings)},
    }
    return {
        **kept,
        **config,
        "GIT_CONFIG_COUNT": str(len(settings)),
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_ATTR_NOSYSTEM": "1",
        "GIT_OPTIONAL_LOCKS": "0",
        "GIT_NO_LAZY_FETCH": "1",  # a partial clone's missing object is named, never fetched
        "GIT_TERMINAL_PROMPT": "0",
        "HOME": os.devnull,
    }


def git(
    checkout: Checkout,
    args: Sequence[str],
    *,
    stdin: bytes = b"",
    runner: proc.DataRunner = proc.data,
    env: Mapping[str, str] = os.environ,
    drivers: Sequence[str] | None = None,
) -> bytes:
    """Run git `args` on `checkout` from its top and return its stdout (a `CommandError` on failure), every
    filter driver of the repository's configuration off (`drivers`: as `filter_drivers` found them, for a caller
    that runs git several times; else found here)."""
    if drivers is None:
        drivers = filter_drivers(checkout, runner=runner, env=env)
    return runner(git_command(checkout, args), cwd=checkout.top, stdin=stdin, env=git_environment(env, drivers))


def filter_drivers(
    checkout: Checkout, *, runner: proc.DataRunner = proc.data, env: Mapping[str, str] = os.environ
) -> tuple[str, ...]:
    """The names of the filter drivers the repository's own configuration file defines (and what it includes)."""
    config = checkout.git_dir / "config"
    asked = ["config", "--file", str(config), "--includes", "--name-only", "--get-regexp", r"^filter\."]
    try:
        listing = runner(git_command(checkout, asked), cwd=checkout.top, env=git_environment(env))
    except CommandError:  # none defined (git says so with status 1), or no config file
        return ()
    names = {line.partition(".")[2].rpartition(".")[0] for line in listing.decode(errors="replace").splitlines()}
    return tuple(sorted(name for name in names if name))


def head_fact(folder: Path, args: Sequence[str], fallback: str, runner: proc.DataRunner = proc.data) -> str:
    """One line git says of the checkout holding `folder` (its revision, its last commit's time), or
    `fallback` outside a checkout or where git cannot say."""
    checkout = find_checkout(folder)
    if checkout is None:
        return fallback
    try:
        return git(checkout, args, runner=runner).decode(errors="replace").strip() or fallback
    except (CommandError, CommandNotFoundError, OSError):
        return fallback
