"""Inductor's cache keys, remembered across runs while the files they digest are unchanged.

Every entry of inductor's FX graph and AOTAutograd caches is keyed on, among the rest, `triton_key`: a sha256
of Triton's compiler sources and of its libtriton, computed again by every process that compiles (the run, each
xdist worker, each whole run) though it changes only when Triton's files do. Torch lets a caller set it before
its first compile (`torch._inductor.codecache.triton_key.set`); this module does, from `inductor-keys.json` in
the entry's cache, each key stored with the fingerprint (every file's path, size and modification time) of the
package it was computed from. A fingerprint that differs, or a store that cannot be read, computes the key
afresh with torch's own function; a torch without the key or a way to set it, and an image without Triton,
are left as they are. `torch_key` is not: a stat of torch's files costs about as much as computing it."""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from torchyard.util.atomic import write_atomically

STORE = "inductor-keys.json"
# Name in torch._inductor.codecache -> the package whose files decide it.
KEYS = {"triton_key": "triton"}


def fingerprint(root: Path) -> str:
    """A digest of every file under `root` (bytecode caches aside): its path, size and modification time."""
    digest = hashlib.sha256(str(root.resolve()).encode())
    for folder, folders, files in os.walk(root):
        folders[:] = sorted(name for name in folders if name != "__pycache__")
        for name in sorted(files):
            path = Path(folder, name)
            status = path.stat()
            digest.update(f"\0{path.relative_to(root)}\0{status.st_size}\0{status.st_mtime_ns}".encode())
    return digest.hexdigest()


def _read(store: Path) -> dict[str, object]:
    with contextlib.suppress(OSError, ValueError):
        found = json.loads(store.read_text(encoding="utf-8"))
        if isinstance(found, dict):
            return found
    return {}


def recall(store: Path, name: str, root: Path, compute: Callable[[], object]) -> tuple[object, str]:
    """The key `name`, and whether it was "stored" (its files unchanged since) or "computed" (and stored)."""
    try:
        current = fingerprint(root)
    except OSError:
        return compute(), "computed"
    remembered = _read(store)
    entry = remembered.get(name)
    if isinstance(entry, dict) and entry.get("fingerprint") == current and isinstance(entry.get("value"), str):
        return entry["value"], "stored"
    value = compute()
    if isinstance(value, str):
        with contextlib.suppress(OSError):  # a read-only cache only costs the next run the computation
            write_atomically(store, json.dumps({**remembered, name: {"fingerprint": current, "value": value}}) + "\n")
    return value, "computed"


def _package_root(package: str) -> Path | None:
    """Where `package` is installed, found without importing it (None where it is not)."""
    with contextlib.suppress(ImportError, ValueError):
        spec = importlib.util.find_spec(package)
        if spec is not None and spec.submodule_search_locations:
            return Path(next(iter(spec.submodule_search_locations)))
    return None


def settable(name: str) -> Any:
    """torch's key `name` where this torch lets a caller set it (a `prefetchable_cache`), else None: torch
    2.11 has `triton_key` as Triton's own cached function, called from inside inductor, with no setter."""
    from torch._inductor import codecache

    key = getattr(codecache, name, None)
    return key if key is not None and callable(getattr(key, "set", None)) else None


def remember(cache: Path) -> dict[str, str]:
    """Set each of `KEYS` in this process from the store in `cache`, or compute and store it: for each, "stored",
    "computed", or "absent" (this torch or this image has no such key to set)."""
    found: dict[str, str] = {}
    for name, package in KEYS.items():
        key = settable(name)
        root = _package_root(package)
        if key is None or root is None:
            found[name] = "absent"
            continue
        value, found[name] = recall(cache / STORE, name, root, key)
        if found[name] == "stored":
            with contextlib.suppress(RuntimeError):  # already computed in this process: torch keeps its own
                key.set(value)
    return found
