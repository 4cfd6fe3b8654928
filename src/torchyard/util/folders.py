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


def folder_bytes(path: Path) -> int:
    """The bytes of the regular files under `path` as the run writes them, walked depth first through folder
    descriptors, one open per level (each folder opened without following a link, so a folder the container
    swaps for a link to / mid-walk is never entered), with no recursion. What vanishes or cannot be reached is
    skipped (the hand-back counts again, exactly); a tree deeper than MAX_DEPTH counts as `sys.maxsize`."""
    total = 0
    stack: list[tuple[int, Iterator[os.DirEntry[str]]]] = []
    try:
        _enter(stack, os.open(path, FOLDER_FLAGS))
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
            try:
                if entry.is_dir(follow_symlinks=False):
                    if len(stack) >= MAX_DEPTH:
                        return sys.maxsize
                    _enter(stack, os.open(entry.name, FOLDER_FLAGS, dir_fd=handle))
                elif entry.is_file(follow_symlinks=False):
                    total += entry.stat(follow_symlinks=False).st_size
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
