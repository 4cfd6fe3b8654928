"""Paths in the checkout, which a pull request writes: the host reaches them through no link.

A committed `lockfiles -> /etc` or `reports/cpu -> /home/runner` would otherwise send the host's reads and
writes wherever the pull request likes. Below the working folder every component of a path must be a real
folder or file; above it (or for a path outside it, above the last two components) the folders are the
caller's own choice.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from torchyard.errors import UsageError


def _checked_from(absolute: Path) -> Path:
    """Where the walk for links starts: the working folder when the path lies in it (the checkout), else the
    grandparent of the path (a folder the caller chose, such as $RUNNER_TEMP/reports/<entry>)."""
    here = Path.cwd()
    return here if absolute.is_relative_to(here) and absolute != here else absolute.parent.parent


def linked_component(path: Path, start: Path | None = None) -> Path | None:
    """The first component of `path` below `start` (by default the checkout, see `_checked_from`) that is a
    symbolic link; None where none is."""
    absolute = Path(os.path.abspath(path))  # noqa: PTH100 (lexical: resolving would follow the links)
    start = _checked_from(absolute) if start is None else Path(os.path.abspath(start))  # noqa: PTH100
    below = [part for part in (absolute, *absolute.parents) if part != start and part.is_relative_to(start)]
    return next((part for part in reversed(below) if part.is_symlink()), None)


def read_checkout_file(path: Path, what: str) -> bytes:
    """The bytes of a regular file the checkout holds, read through no link (one line otherwise)."""
    link = linked_component(path)
    if link is not None:
        raise UsageError(f"{what} {path}: {link} is a symbolic link (committed?): the host never reads through one")
    try:
        handle = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as error:
        raise UsageError(f"{what} {path}: cannot read it ({error.strerror})") from None
    if not stat.S_ISREG(os.fstat(handle).st_mode):
        os.close(handle)
        raise UsageError(f"{what} {path}: not a regular file")
    with os.fdopen(handle, "rb") as stream:
        return stream.read()
