"""How much a folder holds, counted as a writer fills it: what both the image stage (a wheel build's output) and
the run stage (a run's reports and cache) bound while a sealed container writes, so neither imports the other."""

from __future__ import annotations

import os
import stat
from pathlib import Path


def folder_bytes(path: Path) -> int:
    """The bytes of the regular files under `path` as the run writes them, walked through folder descriptors
    (`os.fwalk`: each folder opened without following a link and checked to be the one listed, so a folder the
    container swaps for a link to / mid-walk is never entered); what vanishes, cannot be reached, or lies
    deeper than the walk can hold open is skipped (the hand-back counts again, exactly, and cuts what is deeper
    than MAX_DEPTH)."""
    total = 0
    try:
        for _, _, files, handle in os.fwalk(path, onerror=lambda error: None, follow_symlinks=False):
            for name in files:
                try:
                    info = os.stat(name, dir_fd=handle, follow_symlinks=False)
                except OSError:
                    continue
                if stat.S_ISREG(info.st_mode):
                    total += info.st_size
    except (OSError, RecursionError):
        pass
    return total
