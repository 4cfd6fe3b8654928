"""The host audit: every program a torchyard command's process tree starts on the host, as the kernel saw it
(`strace -f -e trace=execve`), held against a short allow-list. A route that makes the host run something
of the pull request's (git's fsmonitor in a folder it chose, a build backend, a hook, a binary in the
checkout) shows up here as an exec nobody listed, whether or not anyone thought of that route.

The allow-list is data: each entry names a program by where it lies and says why the host may start it.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from torchyard.util.proc import own_uv


@dataclass(frozen=True)
class Allowed:
    path: str  # the program's resolved path
    why: str
    argv_must_hold: tuple[str, ...] = ()  # options every start must carry (git's seam: its git dir named)
    argv_pattern: str = ""  # what its arguments must read as, from the start (a regular expression), if set


def _resolved(program: str | None) -> str:
    return str(Path(program).resolve()) if program else ""


CLIENT_WHY = (
    "a docker client on PATH: torchyard asks each whether it builds with BuildKit, then runs every build and "
    "container through the one that does"
)


def allow_list() -> tuple[Allowed, ...]:
    """What the host side may start, on this machine."""
    clients = {_resolved(folder + "/docker") for folder in os.environ.get("PATH", "").split(os.pathsep) if folder}
    plugins = (
        "/usr/libexec/docker/cli-plugins", "/usr/lib/docker/cli-plugins", str(Path.home() / ".docker" / "cli-plugins"),
    )  # fmt: skip
    return (
        Allowed(
            _resolved(sys.executable),
            "torchyard itself (the interpreter that runs it): `-P -m torchyard` only (the working folder, a "
            "checkout, never first on sys.path), never a file of the checkout's",
            argv_pattern=r'\["[^"]+", "-P", "-m", "torchyard"',
        ),
        *(Allowed(client, CLIENT_WHY) for client in sorted(clients) if Path(client).is_file()),
        *(Allowed(folder, "the docker client's own plugins, which it lists before a command") for folder in plugins),
        Allowed(
            _resolved(shutil.which("git")),
            "git, through torchyard.util.git only: the checkout's own git dir named, never discovered",
            argv_must_hold=("--git-dir=", "--literal-pathspecs"),
        ),
        Allowed(
            _resolved(own_uv()),
            "torchyard's own uv: the lock's check asks its version, a lock resolves (never `uv build`, `uv run`)",
            argv_pattern=r'\["[^"]+", "(--version"|pip", "compile")',
        ),
    )


@dataclass(frozen=True)
class Exec:
    path: str
    argv: str
    succeeded: bool


# execve("path", [argv], ...) and execveat(dirfd, "path", [argv], ...): the path is the first string either way
_CALL = r'(?:execve\(|execveat\([^,]+, )"(?P<path>(?:[^"\\]|\\.)*)", (?P<argv>\[.*?\])'
_LINE = re.compile(rf"^(?P<pid>\d+)\s+{_CALL}, .*?= (?P<result>-?\d+)")
_UNFINISHED = re.compile(rf"^(?P<pid>\d+)\s+{_CALL}.*<unfinished \.\.\.>")
_RESUMED = re.compile(r"^(?P<pid>\d+)\s+<\.\.\. execve(?:at)? resumed>.*= (?P<result>-?\d+)")
# A file opened by path (absolute, or relative to where the command started): what the audit reads of opens.
_OPEN = re.compile(r'^(?P<pid>\d+)\s+(?:openat\(AT_FDCWD, |open\()"(?P<path>(?:[^"\\]|\\.)*)"')


def read_execs(log: Path) -> list[Exec]:
    """Every execve in an `strace -f -o` log, a call split across lines (another process between) joined."""
    found, pending = [], {}
    for line in log.read_text(errors="replace").splitlines():
        if (match := _LINE.match(line)) is not None:
            found.append(Exec(match["path"], match["argv"], match["result"] == "0"))
        elif (match := _UNFINISHED.match(line)) is not None:
            pending[match["pid"]] = (match["path"], match["argv"])
        elif (match := _RESUMED.match(line)) is not None and match["pid"] in pending:
            path, argv = pending.pop(match["pid"])
            found.append(Exec(path, argv, match["result"] == "0"))
    return found


def read_opens(log: Path, started_in: Path) -> list[str]:
    """Every path a traced process opened by name (found or not), made absolute against `started_in`."""
    found = []
    for line in log.read_text(errors="replace").splitlines():
        if (match := _OPEN.match(line)) is not None:
            found.append(os.path.join(started_in, match["path"]))  # noqa: PTH118 (lexical: the path as opened)
    return found


# What the host opens only to run it: Python's modules (their bytecode cache is tried first, found or not; a
# sourceless module is its `.pyc` beside no source), its path configuration, and native libraries. The host reads
# a checkout's sources as data (a project's files for an image), never bytecode, which its contexts leave out.
CODE_OPENED = re.compile(r"(/__pycache__/|\.pyc$|\.pth$|\.so(\.[0-9.]+)?$)")


def loaded_code(opened: Sequence[str], hostile: Sequence[Path]) -> list[str]:
    """What the audit refuses of the opens: code loaded from a folder the pull request writes."""
    return [
        f"{path}: opened as code from {where}, a folder the pull request writes"
        for path in opened
        if CODE_OPENED.search(path) and (where := next((f for f in hostile if _inside(path, f)), None)) is not None
    ]


def _inside(path: str, folder: Path) -> bool:
    return Path(os.path.abspath(path)).is_relative_to(os.path.abspath(folder))  # noqa: PTH100 (lexical)


def violations(execs: Sequence[Exec], allowed: Sequence[Allowed], hostile: Sequence[Path]) -> list[str]:
    """What the audit refuses: any exec (attempted, even) of a path inside a folder the pull request writes
    (`hostile`: the checkout, the reports, the caches), and any started program not on the allow-list or
    started without the options its entry requires."""
    refused = []
    for item in execs:
        where = next((folder for folder in hostile if _inside(item.path, folder)), None)
        if where is not None:
            refused.append(f"{item.path} {item.argv[:200]}: executed from {where}, a folder the pull request writes")
            continue
        if not item.succeeded:
            continue  # a PATH search's misses
        resolved = _resolved(item.path)
        entry = next(
            (rule for rule in allowed if rule.path and (resolved == rule.path or _inside(resolved, Path(rule.path)))),
            None,
        )
        if entry is None:
            refused.append(f"{item.path} {item.argv[:200]}: not on the host's allow-list")
        elif any(option not in item.argv for option in entry.argv_must_hold):
            refused.append(f"{item.path} {item.argv[:200]}: started without {', '.join(entry.argv_must_hold)}")
        elif entry.argv_pattern and re.match(entry.argv_pattern, item.argv) is None:
            refused.append(f"{item.path} {item.argv[:200]}: started with arguments its entry does not allow")
    return refused


def traced(args: Sequence[str], log: Path) -> list[str]:
    """`args` under strace, following every child, recording each execve and execveat (arguments up to 400
    characters) and each file opened by name."""
    strace = shutil.which("strace")
    if strace is None:
        raise AssertionError("strace is missing: the host audit needs Debian's strace (.ci/run installs it)")
    calls = "trace=execve,execveat,open,openat"
    return [strace, "-f", "-qq", "-s", "400", "-e", calls, "-e", "signal=none", "-o", str(log), *args]
