"""Install an entry's lockfile into an environment: `uv pip sync --require-hashes`, mirrors applied.

The same argument list serves a local venv (`nox -s test-cpu -- --local`) and an image build.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from torchyard.mirrors import Source, index_args

FIND_LINKS_ENV = "TORCHYARD_FIND_LINKS"


def extra_find_links(env: Mapping[str, str] = os.environ) -> tuple[str, ...]:
    """Local wheel folders to try before any index (`TORCHYARD_FIND_LINKS`, whitespace-separated).

    Only for installs: the lock's hashes decide which files are acceptable, so a folder can only save a
    download, never change what is installed.
    """
    return tuple(folder for folder in env.get(FIND_LINKS_ENV, "").split() if Path(folder).is_dir())


def sync_args(
    lockfile: Path,
    python: str,
    sources: Sequence[Source],
    *,
    find_links: Sequence[str] = (),
    index_strategy: str = "first-index",
) -> tuple[str, ...]:
    """`uv pip sync` that installs exactly the lock (and removes anything else), every file hash-checked."""
    args: list[str] = [
        "uv", "pip", "sync", str(lockfile),
        "--python", python,
        "--require-hashes",
        "--no-config",
        "--index-strategy", index_strategy,
    ]  # fmt: skip
    args += index_args(sources, find_links)
    return tuple(args)
