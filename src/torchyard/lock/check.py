"""The offline freshness check: recompute the inputs digest and the body digest, name what changed."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from torchyard.errors import StaleLockError
from torchyard.lock.inputs import LockInputs
from torchyard.lock.lockfile import body_digest, lock_path, read_header, relock_hint
from torchyard.matrix.schema import Entry
from torchyard.util.checkout import linked_component

Status = Literal["fresh", "stale", "missing"]


@dataclass(frozen=True)
class Freshness:
    entry: str
    status: Status
    detail: str


def _changed_inputs(recorded: str, current: Mapping[str, Any]) -> list[str]:
    try:
        old = json.loads(recorded)
    except json.JSONDecodeError:
        return ["header"]
    if not isinstance(old, dict):
        return ["header"]
    return sorted(key for key in {*old, *current} if old.get(key) != current.get(key))


def _mirrored_indexes(field: str, entry: Entry) -> list[str] | None:
    """The index names a made-through-mirrors line lists, or None unless it is a JSON list of this entry's."""
    try:
        names = json.loads(field)
    except json.JSONDecodeError:
        return None
    known = {index.name for index in entry.indexes}
    if not isinstance(names, list) or not names or not all(isinstance(n, str) and n in known for n in names):
        return None
    return names


def lock_freshness(entry: Entry, lockdir: Path, uv: str) -> Freshness:
    """Compare the lockfile with the current inputs; offline, reads one file."""
    path = lock_path(lockdir, entry)
    link = linked_component(path)
    if link is not None:  # a committed link to a host file: never read, in any run
        return Freshness(entry.name, "stale", f"{link} is a symbolic link: a lockfile is a file the checkout holds")
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        needs = ", ".join(f"{index.name} ({index.url})" for index in entry.indexes)
        return Freshness(entry.name, "missing", f"run {relock_hint([entry.name])} on a machine that reaches {needs}")
    except (OSError, UnicodeDecodeError) as error:
        why = error.strerror if isinstance(error, OSError) else "not UTF-8 text"
        return Freshness(entry.name, "stale", f"{path} cannot be read ({why})")
    fields, body = read_header(text)
    current = LockInputs.of(entry, uv)
    if "inputs-digest" not in fields or "body-digest" not in fields:
        return Freshness(entry.name, "stale", "no torchyard header: not made by the lock session")
    through = fields.get("made-through-mirrors", "")
    if fields["body-digest"] != body_digest(body, through):
        return Freshness(entry.name, "stale", "edited by hand: the body does not match its recorded digest")
    if fields["inputs-digest"] != current.digest():
        changed = _changed_inputs(fields.get("inputs", ""), current.record())
        return Freshness(entry.name, "stale", f"inputs changed: {', '.join(changed)}")
    if through:
        names = _mirrored_indexes(through, entry)
        if names is None:  # what a reviewer reads is only ever this entry's index names
            return Freshness(entry.name, "stale", "its made-through-mirrors line is not one torchyard writes")
        return Freshness(
            entry.name, "fresh", f"{path} (made through mirrors of {', '.join(names)}: their files, not the index's)"
        )
    return Freshness(entry.name, "fresh", str(path))


def require_fresh(entry: Entry, lockdir: Path, uv: str) -> None:
    """Raise unless the entry's lock is fresh: what builds and runs check before anything else."""
    freshness = lock_freshness(entry, lockdir, uv)
    if freshness.status == "missing":  # its detail names the command and the indexes it needs
        raise StaleLockError(f"entry {entry.name!r}: lock is missing: {freshness.detail}")
    if freshness.status == "stale":
        raise StaleLockError(f"entry {entry.name!r}: lock is stale ({freshness.detail}): {relock_hint([entry.name])}")
