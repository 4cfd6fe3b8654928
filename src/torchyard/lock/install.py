"""Install an entry's lockfile into an environment: `uv pip sync --require-hashes`, mirrors applied."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from torchyard.matrix.machine import Source, index_args


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
        # Once, at install (then only what changed): the suites' start-up imports torch and ExecuTorch.
        "--compile-bytecode",
    ]  # fmt: skip
    args += index_args(sources, find_links)
    return tuple(args)
