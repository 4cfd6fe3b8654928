"""How much a folder holds, counted as a writer fills it: what both the image stage (a wheel build's output) and
the run stage (a run's reports and cache) bound while a sealed container writes, so neither imports the other."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

# Deeper than this the count stops and says "over any bound": the hand-back cuts what is deeper than 32 folders,
# and a chain this deep is a writer hiding bytes from the count (a recursive walk gave up at Python's limit).
MAX_DEPTH = 64
FOLDER_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
# What an entry costs the disk at the least (its inode and its name): a million empty files are not nothing.
ENTRY_BYTES = 512


def folder_bytes(path: Path) -> int:
    """The bytes under `path` as the disk holds them while the run writes: each regular file's size or its
    allocated blocks, whichever is more (space allocated past a file's end counts), and `ENTRY_BYTES` an entry.
    Walked depth first through folder descriptors, one open per level (each folder opened without following a
    link, so a folder the container swaps for a link to / mid-walk is never entered), with no recursion. What
    vanishes is skipped (the hand-back counts again, exactly); a folder this user may not read (made unlistable
    by the run, on a runner that is not root) or a tree deeper than MAX_DEPTH counts as `sys.maxsize`."""
    total = 0
    stack: list[tuple[int, Iterator[os.DirEntry[str]]]] = []
    try:
        _enter(stack, os.open(path, FOLDER_FLAGS))
    except PermissionError:
        return sys.maxsize
    except OSError:
        return 0
    try:
        while stack:
            handle, entries = stack[-1]
            entry = next(entries, None)
            if entry is None:
                os.close(handle)
                stack.pop()
                continue
            total += ENTRY_BYTES
            try:
                if entry.is_dir(follow_symlinks=False):
                    if len(stack) >= MAX_DEPTH:
                        return sys.maxsize
                    _enter(stack, os.open(entry.name, FOLDER_FLAGS, dir_fd=handle))
                elif entry.is_file(follow_symlinks=False):
                    info = entry.stat(follow_symlinks=False)
                    total += max(info.st_size, info.st_blocks * 512)
            except PermissionError:
                return sys.maxsize
            except OSError:
                continue
    finally:
        for handle, _ in stack:
            os.close(handle)
    return total


def _enter(stack: list[tuple[int, Iterator[os.DirEntry[str]]]], handle: int) -> None:
    try:
        stack.append((handle, iter(os.scandir(handle))))
    except OSError:
        os.close(handle)
        raise
