"""Where a container writes its reports: a private folder of torchyard's own, never the folder `--reports`
names, which the workflows upload with `if: always()` (and upload-artifact follows links).

A run stopped midway (its step cancelled, torchyard killed outright) leaves `--reports` as the run's start
made it, empty: files reach it only after the hand-back vetted them in the staging folder and the host
stamped them. A staging folder whose container is gone is removed by the next run or by `prune`.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import stat
import sys
import tempfile
from collections.abc import Collection, Iterator
from pathlib import Path

from torchyard.errors import UsageError
from torchyard.run.handback import DIRECTORY_FLAGS, empty_folder

STAGING = "torchyard-staging"


def staging_root(temp: str | None = None) -> Path:
    """The folder every run's staging folder lies in: this user's, in the system's temporary folder."""
    return Path(temp or tempfile.gettempdir()) / f"{STAGING}-{os.getuid()}"


def _own_folder(path: Path) -> None:
    """`path` as a real folder of this user's that no one else can enter (made when missing); anything else
    there (a link, another user's folder planted in a shared /tmp) is refused in one line."""
    with contextlib.suppress(FileExistsError):
        path.mkdir(mode=0o700)
    info = path.lstat()
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
        raise UsageError(f"{path}: not a private folder of this user's (a link, or another's): remove it")


def make_stage(stage: Path, owner: tuple[int, int] | None) -> Path:
    """A new, empty staging folder (named for its container, in `staging_root()`), given to `owner` (the
    container's user, where it is not this one's)."""
    _own_folder(stage.parent)
    stage.mkdir(mode=0o700)  # a new name per run: an existing one is an error, never reused
    if owner is not None:
        os.lchown(stage, *owner)
    return stage


def lock_of(stage: Path) -> Path:
    """The lock a run holds its staging folder by: beside the folder, never in it. The folder is the container's
    /reports, and a lock taken on it from inside outlived the run that made it (a dead run's container held it
    and was never swept)."""
    return stage.parent / f".{stage.name}.lock"


@contextlib.contextmanager
def holding(stage: Path) -> Iterator[None]:
    """Hold the staging folder for the run that made it (an exclusive lock on `lock_of(stage)`, released when the
    run ends or dies): a concurrent run's sweep leaves a held folder alone."""
    handle = os.open(lock_of(stage), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield
    finally:
        os.close(handle)


def _held(stage: Path) -> bool:
    try:
        handle = os.open(lock_of(stage), os.O_RDWR | os.O_NOFOLLOW)
    except OSError:
        return False
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(handle)
    return False


def abandoned(root: Path, name: str) -> bool:
    """Whether the run of container `name` is known to be gone: its staging folder is in `root` (this user's
    runs') and no process holds it, which a live run does from before its container starts until it is removed.
    A container of another user's run, or of none, is not known so: its deadline decides."""
    stage = root / name
    return stage.is_dir() and not stage.is_symlink() and not _held(stage)


def remove_stage(stage: Path) -> None:
    """Remove a staging folder whatever the container left in it (no link followed, any depth)."""
    try:
        empty_folder(stage)
        stage.rmdir()
    except FileNotFoundError:
        pass
    with contextlib.suppress(FileNotFoundError):
        lock_of(stage).unlink()


def publish(stage: Path, reports: Path) -> None:
    """Copy the vetted staging folder (folders and regular files only, the hand-back removed the rest) into
    `reports`, an empty folder of torchyard's; read through no link, written as new files."""
    pending = [""]
    while pending:
        relative = pending.pop()
        handle = os.open(stage / relative if relative else stage, DIRECTORY_FLAGS)
        try:
            with os.scandir(handle) as children:
                entries = sorted((child.name, child.stat(follow_symlinks=False).st_mode) for child in children)
            for name, mode in entries:
                inner = f"{relative}{name}"
                if stat.S_ISDIR(mode):
                    (reports / inner).mkdir()
                    pending.append(inner + "/")
                elif stat.S_ISREG(mode):
                    source = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=handle)
                    with os.fdopen(source, "rb") as reading, (reports / inner).open("xb") as writing:
                        shutil.copyfileobj(reading, writing)
        finally:
            os.close(handle)


def sweep_stages(root: Path, alive: Collection[str]) -> list[str]:
    """Remove the staging folders under `root` whose container is not in `alive` and whose run no longer holds
    them (a run killed outright left them; a run between making its folder and starting its container, or
    handing its reports over, still holds its own); returns their names."""
    if not root.is_dir() or root.is_symlink():
        return []
    with os.scandir(root) as entries:  # the folders: each one's lock lies beside it (`lock_of`)
        names = sorted(
            entry.name for entry in entries if entry.name not in alive and entry.is_dir(follow_symlinks=False)
        )
    gone = [name for name in names if not _held(root / name)]
    for name in gone:
        try:
            remove_stage(root / name)
        except OSError as error:  # a leftover this user cannot remove fails no later run: said, and left
            print(f"torchyard: a dead run's reports in {root / name} could not be removed ({error})", file=sys.stderr)
    return gone
