"""Files replaced atomically: a failure leaves the old file, never a half-written one."""

from __future__ import annotations

import os
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO, TypeVar

T = TypeVar("T")


def replace_atomically(path: Path, write: Callable[[BinaryIO], T], *, durable: bool = True) -> T:
    """Write through `write` into a temporary file beside `path`, then rename it over `path` (atomic on one
    filesystem); what `write` returned. `durable`: the bytes reach the disk before the rename (fsync), so a
    crash cannot leave an empty file under the name; a cache whose entries carry their own digest can do
    without, since a torn entry is found and rebuilt."""
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(handle, _mode_for(path))  # mkstemp's 0600 would make a shared file private
        with os.fdopen(handle, "wb") as stream:
            written = write(stream)
            if durable:
                stream.flush()
                os.fsync(stream.fileno())
        Path(temporary).replace(path)
        return written
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def _mode_for(path: Path) -> int:
    """The mode the replaced file had, else what a plain open would give a new one (0666 less the umask)."""
    try:
        info = path.lstat()
    except FileNotFoundError:
        info = None
    if info is not None and stat.S_ISREG(info.st_mode):
        return stat.S_IMODE(info.st_mode) & 0o777
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def write_atomically(path: Path, text: str) -> None:
    """Replace `path` only once the new text is fully on disk; a failure leaves the old file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    replace_atomically(path, lambda stream: stream.write(text.encode("utf-8")))
