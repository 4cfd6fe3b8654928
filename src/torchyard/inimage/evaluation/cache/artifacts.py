"""Lowered programs cached by content: `.pt2`, `.pte` and Torch-TensorRT's `.ep` files under the key of
everything that decides them (`keys.artifact_key`; a case whose code cannot be keyed is not cached).

A hit is copied into the run's folder, loaded, run and compared like a fresh program: a cache saves the
lowering, never a comparison. Writes go to a temporary file and a rename (`util.atomic`), so concurrent writers
of one key leave one whole file; each entry's JSON sidecar holds its sha256, and an entry that does not match
is removed and rebuilt. A lowering that fails with the case's declared known failure is recorded (the error's
classes, message and description, no artifact) and raised again (`RecordedFailure`) only while the case still
declares a known failure that matches it; any other failure is never recorded.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from torchyard import contract
from torchyard.inimage.cases import KnownFailure
from torchyard.inimage.evaluation.errors import RecordedFailure, describe_error, error_types
from torchyard.util.atomic import replace_atomically


def file_digest(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def entry_cache(env: Mapping[str, str], root: Path | None) -> ArtifactCache:
    """The entry's artifact cache, `artifacts/` under its cache `root`; none where there is no root, or where
    the run turned the artifact cache off."""
    if root is None or env.get(contract.ARTIFACT_CACHE) == "off":
        return ArtifactCache(None)
    return ArtifactCache(root / "artifacts")


class ArtifactCache:
    """A folder of `<key><suffix>` files with `<key>.json` sidecars; `root=None` turns caching off."""

    def __init__(self, root: Path | None) -> None:
        self.root = root
        self.rebuilt: set[str] = set()  # keys whose entry was corrupt in this process

    def lookup(self, key: str, suffix: str, target: Path) -> dict[str, Any] | None:
        """Copy the entry's artifact to `target` and return its sidecar's fields, or None on a miss. The
        digest is taken of exactly the bytes copied: a corrupt entry (or one a concurrent writer replaced
        between the sidecar and the file) is removed and reported as a miss, never used."""
        if self.root is None:
            return None
        artifact, sidecar = self.root / f"{key}{suffix}", self.root / f"{key}.json"
        try:
            meta = json.loads(sidecar.read_text())
            if "failure" in meta:  # a recorded known failure: no artifact, its fields are what is checked
                if _failure_digest(meta["failure"]) == meta["sha256"]:
                    return dict(meta)
                raise ValueError("a failure record whose fields do not match its digest")
            with artifact.open("rb") as source, target.open("wb") as copy:
                copied = _copy_hashing(source, copy)
            if copied == meta["sha256"]:
                return dict(meta)
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError):
            pass  # an unreadable sidecar is as corrupt as a digest mismatch
        target.unlink(missing_ok=True)
        self.rebuilt.add(key)
        for path in (artifact, sidecar):
            path.unlink(missing_ok=True)
        return None

    def store(self, key: str, suffix: str, source: Path, meta: dict[str, Any]) -> None:
        """Copy `source` in under `key`, atomically; the sidecar (written last) makes the entry whole."""
        if self.root is None:
            return
        self.root.mkdir(parents=True, exist_ok=True)
        with source.open("rb") as data:  # read once: the digest is of exactly the bytes stored
            digest = replace_atomically(
                self.root / f"{key}{suffix}", lambda handle: _copy_hashing(data, handle), durable=False
            )
        sidecar = json.dumps({**meta, "sha256": digest, "suffix": suffix}, sort_keys=True).encode()
        replace_atomically(self.root / f"{key}.json", lambda handle: handle.write(sidecar), durable=False)

    def store_failure(self, key: str, suffix: str, error: BaseException) -> None:
        """Record that lowering under `key` failed with `error` (a sidecar alone, written atomically)."""
        if self.root is None:
            return
        self.root.mkdir(parents=True, exist_ok=True)
        failure = {"types": error_types(error), "message": str(error), "description": describe_error(error)}
        record = {"failure": failure, "sha256": _failure_digest(failure), "suffix": suffix}
        replace_atomically(
            self.root / f"{key}.json",
            lambda handle: handle.write(json.dumps(record, sort_keys=True).encode()),
            durable=False,
        )
        (self.root / f"{key}{suffix}").unlink(missing_ok=True)  # an older artifact under this key is stale

    def materialize(
        self,
        key: str | None,
        suffix: str,
        target: Path,
        build: Callable[[Path], dict[str, Any]],
        *,
        known: KnownFailure | None = None,
    ) -> tuple[dict[str, Any], str]:
        """Make `target` hold the artifact: copied from the cache on a hit, else written by `build(target)`
        (which returns the sidecar's fields) and stored. Returns the fields and what the cache did:
        "hit", "miss", "rebuilt" (a corrupt entry was replaced), "off" or "unkeyable".

        `known` is the case's known failure on this backend: a build that fails with it is recorded, and a
        record that it still matches is raised again as a `RecordedFailure`."""
        if key is None or self.root is None:
            return build(target), "off" if self.root is None else "unkeyable"
        hit = self.lookup(key, suffix, target)
        if hit is not None and "failure" not in hit:
            return hit, "hit"
        if hit is not None and known is not None and known.matches(hit["failure"]["types"], hit["failure"]["message"]):
            raise RecordedFailure(**hit["failure"])
        try:
            meta = build(target)
        except Exception as error:
            if known is not None and known.matches(error_types(error), str(error)):
                self.store_failure(key, suffix, error)
            raise
        self.store(key, suffix, target, meta)
        return meta, "rebuilt" if key in self.rebuilt else "miss"


def _copy_hashing(source: Any, target: Any) -> str:
    """Copy one open binary file to another in blocks; the sha256 of the bytes copied."""
    digest = hashlib.sha256()
    for block in iter(lambda: source.read(1 << 20), b""):
        digest.update(block)
        target.write(block)
    return digest.hexdigest()


def _failure_digest(failure: object) -> str:
    return hashlib.sha256(json.dumps(failure, sort_keys=True).encode()).hexdigest()
