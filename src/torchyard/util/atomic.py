"""Files replaced atomically: a failure leaves the old file, never a half-written one."""

from __future__ import annotations

import os
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


def write_atomically(path: Path, text: str) -> None:
    """Replace `path` only once the new text is fully on disk; a failure leaves the old file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    replace_atomically(path, lambda stream: stream.write(text.encode("utf-8")))
