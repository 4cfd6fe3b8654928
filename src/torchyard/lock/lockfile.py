"""The lockfile format: uv's hashed output under a header recording the inputs and both digests."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from pathlib import Path

from torchyard.lock.inputs import LockInputs
from torchyard.matrix.schema import Entry

HEADER_PREFIX = "# torchyard-"


def lock_path(lockdir: Path, entry: Entry) -> Path:
    return lockdir / f"{entry.name}.txt"


def reproduce_command(entry: Entry) -> str:
    return f"nox -s lock -- {entry.name}"


def relock_hint(names: Sequence[str]) -> str:
    """The command that remakes these entries' locks, as nox runs it and as a tool install of torchyard does."""
    joined = " ".join(names)
    return f"`nox -s lock -- {joined}` (or `torchyard lock {joined}`)"


def through_field(through: Sequence[str]) -> str:
    """The made-through-mirrors line's value: the index names as a JSON list (a TOML key may hold a comma)."""
    return json.dumps(list(through), ensure_ascii=False)


def body_digest(body: str, through: str = "") -> str:
    """The body's digest; a lock made through mirrors covers that line too, so deleting or adding it is an edit."""
    covered = f"made-through-mirrors: {through}\n{body}" if through else body
    return "sha256:" + hashlib.sha256(covered.encode()).hexdigest()


def render_lockfile(entry: Entry, inputs: LockInputs, body: str, through: Sequence[str] = ()) -> str:
    """The lockfile: its header (what `lock --check` reads), then uv's body. `through` names the indexes this
    machine read from a mirror (`TORCHYARD_MIRRORS`): the pins are what the mirror served, which a reviewer must
    know; only the names are written, never where the mirrors are."""
    field = through_field(through) if through else ""
    header = [
        f"# torchyard lockfile for entry {entry.name!r}. Do not edit: run `{reproduce_command(entry)}`.\n",
        f"# torchyard-inputs-digest: {inputs.digest()}\n",
        f"# torchyard-body-digest: {body_digest(body, field)}\n",
    ]
    if field:
        header.append(f"# torchyard-made-through-mirrors: {field}\n")
    header.append(f"# torchyard-inputs: {json.dumps(inputs.record(), sort_keys=True, separators=(',', ':'))}\n")
    return "".join(header) + body


def read_header(text: str) -> tuple[dict[str, str], str]:
    """The `# torchyard-<key>: value` lines, and the body after them."""
    fields: dict[str, str] = {}
    lines = text.splitlines(keepends=True)
    position = 0
    while position < len(lines) and lines[position].startswith("#"):
        match = re.match(r"# torchyard-([a-z-]+): (.*)\n?$", lines[position])
        if match:
            fields[match[1]] = match[2]
        position += 1
        if lines[position - 1].startswith("# torchyard-inputs: "):
            break
    return fields, "".join(lines[position:])
