"""The reports folder, treated as written by hostile code: one run at a time per folder, an empty folder
at the start, and nothing followed on the way back (links are removed, never chowned or read through).

A test in the container can create `reports/x -> /etc/shadow`; a root caller that followed it would hand
a host file to the container's user or copy it into a public step summary.
"""

from __future__ import annotations

import errno
import fcntl
import os
import shutil
import stat
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from torchyard.errors import UsageError


def _usable_folder(path: Path) -> None:
    if path.is_symlink():
        raise UsageError(f"reports folder {path} is a symbolic link: refusing to write through it")
    if path.exists() and not path.is_dir():
        raise UsageError(f"reports folder {path} is a file, not a folder: pass --reports PATH")


@contextmanager
def exclusive_run(path: Path) -> Iterator[None]:
    """Hold `<path>.lock` for the run: a second run of the same entry on this machine waits its turn."""
    _usable_folder(path.parent)
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = path.parent / f".{path.name}.lock"
    handle = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"torchyard: another run is writing {path}; waiting for it to finish", file=sys.stderr, flush=True)
            fcntl.flock(handle, fcntl.LOCK_EX)
        yield
    finally:
        os.close(handle)


def fresh_folder(path: Path) -> None:
    """An empty folder at `path` (a previous run's reports are removed; links in it are not followed)."""
    _usable_folder(path)
    if path.exists():
        shutil.rmtree(path)
    path.mkdir(parents=True)


def hand_back(path: Path, uid: int, gid: int) -> list[str]:
    """Remove every link and special file under `path`, then give the rest to uid:gid without following
    anything. Returns what was removed, relative to `path`."""
    removed: list[str] = []
    for folder, folders, files in os.walk(path, followlinks=False):
        for name in [*folders, *files]:
            entry = Path(folder) / name
            mode = entry.lstat().st_mode
            if stat.S_ISLNK(mode) or not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
                entry.unlink()
                removed.append(str(entry.relative_to(path)))
            else:
                os.lchown(entry, uid, gid)
        folders[:] = [
            name for name in folders if (Path(folder) / name).is_dir() and not (Path(folder) / name).is_symlink()
        ]
    os.lchown(path, uid, gid)
    return removed


def read_report(path: Path) -> str | None:
    """A report file's text, only if it is a regular file (never through a link); None when absent."""
    try:
        handle = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as error:
        if error.errno in (errno.ENOENT, errno.ELOOP):
            return None
        raise
    with os.fdopen(handle, "rb") as stream:
        if not stat.S_ISREG(os.fstat(stream.fileno()).st_mode):
            return None
        return stream.read().decode("utf-8", errors="replace")
