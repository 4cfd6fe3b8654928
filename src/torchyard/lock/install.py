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
    compile_bytecode: bool = True,
    offline: bool = False,
) -> tuple[str, ...]:
    """`uv pip sync` that installs exactly the lock (and removes anything else), every file hash-checked;
    with `compile_bytecode`, every module's bytecode is written too (the suites' start-up imports torch and
    ExecuTorch, and a run may not be allowed to write it): uv then checks all of site-packages, torch's
    15,000 files among them, even when nothing changed. `offline`: no index is read (uv otherwise asks the
    indexes about every package even when the environment already matches the lock); a package that is
    missing must then come from uv's cache, or the sync fails."""
    args: list[str] = [
        "uv", "pip", "sync", str(lockfile),
        "--python", python,
        "--require-hashes",
        "--no-config",
        "--index-strategy", index_strategy,
        *(["--compile-bytecode"] if compile_bytecode else []),
        *(["--offline"] if offline else []),
    ]  # fmt: skip
    args += index_args(sources, find_links)
    return tuple(args)
