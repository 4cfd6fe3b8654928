"""Per-entry lockfiles: `uv pip compile --generate-hashes`, an input digest, an offline freshness check.

A lockfile is uv's output under a header that records every input (requirements, indexes, Python,
platform, index strategy, cut-off date, vendor pins, uv version), the digest of those inputs and the
digest of the body. `check_entry` recomputes both without touching the network: a changed input makes
the lock stale (and says which), a hand edit of the body is caught by the body digest.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from torchyard import cmd
from torchyard.errors import CommandError, LockError, StaleLockError
from torchyard.matrix.schema import Entry
from torchyard.mirrors import Source, index_args, sources_for
from torchyard.wheelfile import write_wheel

HEADER_PREFIX = "# torchyard-"
UV_INSTALL_HINT = "install it with `python3 -m pip install uv` (nox's sessions bring their own)"


def lock_path(lockdir: Path, entry: Entry) -> Path:
    return lockdir / f"{entry.name}.txt"


def reproduce_command(entry: Entry) -> str:
    return f"nox -s lock -- {entry.name}"


def lock_inputs(entry: Entry, uv_version: str) -> dict[str, Any]:
    """Everything that decides a lock's bytes. Index URLs are the matrix's, never a machine's mirror."""
    return {
        "entry": entry.name,
        "requirements": list(entry.requirements),
        "indexes": [[index.name, index.url] for index in entry.indexes],
        "index-strategy": entry.accelerator.index_strategy,
        "python": entry.python,
        "platform": entry.accelerator.platform,
        "exclude-newer": entry.exclude_newer,
        "vendor": [[pin.name, pin.version] for pin in entry.accelerator.vendor],
        "uv": uv_version,
    }


def digest_of(data: object) -> str:
    canonical = json.dumps(data, sort_keys=True, separators=(",", ":")).encode()
    return "sha256:" + hashlib.sha256(canonical).hexdigest()


def body_digest(body: str) -> str:
    return "sha256:" + hashlib.sha256(body.encode()).hexdigest()


def compile_args(
    entry: Entry,
    sources: Sequence[Source],
    output: Path,
    *,
    excludes: Path | None,
) -> tuple[str, ...]:
    """The `uv pip compile` argument list (run from the folder holding `requirements.in`)."""
    args: list[str] = [
        "uv", "pip", "compile", "requirements.in",
        "--generate-hashes",
        "--no-header",
        "--no-config",
        "--python-version", entry.python,
        "--python-platform", entry.accelerator.platform,
        "--index-strategy", entry.accelerator.index_strategy,
        "--exclude-newer", entry.exclude_newer,
        "--output-file", str(output),
    ]  # fmt: skip
    args += index_args(sources)
    if excludes is not None:
        args += ["--excludes", str(excludes)]
    for pin in entry.accelerator.vendor:
        args += ["--no-emit-package", pin.name]
    return tuple(args)


def uv_version(runner: cmd.Runner = cmd.run) -> str:
    output = runner(["uv", "--version"], capture=True, hint=UV_INSTALL_HINT).stdout.split()
    if len(output) < 2:
        raise LockError(f"cannot read uv's version from {' '.join(output)!r}")
    return output[1]


def _vendor_inputs(entry: Entry, workdir: Path) -> tuple[list[str], Path | None]:
    """Requirement lines that pin each versioned vendor package to a metadata-only stand-in wheel,
    and an excludes file for the ones kept at whatever version the base ships ("*").

    The stand-in has the vendor's exact version and no dependencies, and is a direct requirement (not
    an override, which would silence every other package's constraint on it): the rest of the tree must
    accept that version or the lock fails, and nothing the vendor package would pull from the index
    (CUDA libraries under a ROCm torch, say) enters the lock. The install side keeps the base's real
    bytes with `uv pip install --override`.
    """
    pinned = [pin for pin in entry.accelerator.vendor if pin.version != "*"]
    unpinned = [pin for pin in entry.accelerator.vendor if pin.version == "*"]
    lines = [f"{pin.name} @ {write_wheel(workdir / 'vendor', pin.name, pin.version).as_uri()}" for pin in pinned]
    excludes = None
    if unpinned:
        excludes = workdir / "excludes.txt"
        excludes.write_text("".join(f"{pin.name}\n" for pin in unpinned))
    return lines, excludes


def render_lockfile(entry: Entry, inputs: Mapping[str, Any], body: str) -> str:
    header = [
        f"# torchyard lockfile for entry {entry.name!r}. Do not edit: run `{reproduce_command(entry)}`.\n",
        f"# torchyard-inputs-digest: {digest_of(inputs)}\n",
        f"# torchyard-body-digest: {body_digest(body)}\n",
        f"# torchyard-inputs: {json.dumps(inputs, sort_keys=True, separators=(',', ':'))}\n",
    ]
    return "".join(header) + body


def write_atomically(path: Path, text: str) -> None:
    """Replace `path` only once the new text is fully on disk; a failure leaves the old file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            stream.write(text)
            stream.flush()
            os.fsync(stream.fileno())
        Path(temporary).replace(path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


UV_ERROR_MARKERS = ("error:", "\N{MULTIPLICATION SIGN}")  # uv starts a failure with one or the other


def _uv_explanation(output: str) -> str:
    """uv's own reason and its first hint, condensed to one line (the full text is printed above)."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    hints = [line for line in lines if line.startswith("hint:")]
    for position, line in enumerate(lines):
        marker = next((marker for marker in UV_ERROR_MARKERS if line.startswith(marker)), None)
        if marker is not None:
            rest = [item for item in lines[position + 1 :] if not item.startswith("hint:")][:3]
            return " ".join([line.removeprefix(marker).strip(), *rest, *hints[:1]])
    return lines[-1] if lines else "no output"


def lock_entry(
    entry: Entry,
    lockdir: Path,
    mirrors: Mapping[str, Source],
    *,
    runner: cmd.Runner = cmd.run,
    env: Mapping[str, str] = os.environ,
) -> Path:
    """Resolve `entry` with uv and write its lockfile atomically; on any failure nothing is written."""
    inputs = lock_inputs(entry, uv_version(runner))
    target = lock_path(lockdir, entry)
    with tempfile.TemporaryDirectory(prefix=f"torchyard-lock-{entry.name}-") as scratch:
        workdir = Path(scratch)
        vendor_lines, excludes = _vendor_inputs(entry, workdir)
        lines = [*entry.requirements, *vendor_lines]
        (workdir / "requirements.in").write_text("".join(f"{line}\n" for line in lines))
        output = workdir / "lock.txt"
        args = compile_args(entry, sources_for(entry.indexes, mirrors), output, excludes=excludes)
        uv_env = {**env, "UV_PYTHON_DOWNLOADS": "never", "UV_NO_PROGRESS": "1"}
        try:
            runner(args, cwd=workdir, env=uv_env, capture=True, hint=UV_INSTALL_HINT)
        except CommandError as error:
            sys.stderr.write(error.output)
            raise LockError(f"entry {entry.name!r}: uv could not lock it: {_uv_explanation(error.output)}") from None
        body = output.read_text(encoding="utf-8")
    write_atomically(target, render_lockfile(entry, inputs, body))
    return target


Status = Literal["fresh", "stale", "missing"]


@dataclass(frozen=True)
class Freshness:
    entry: str
    status: Status
    detail: str


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


def _changed_inputs(recorded: str, current: Mapping[str, Any]) -> list[str]:
    try:
        old = json.loads(recorded)
    except json.JSONDecodeError:
        return ["header"]
    if not isinstance(old, dict):
        return ["header"]
    return sorted(key for key in {*old, *current} if old.get(key) != current.get(key))


def check_entry(entry: Entry, lockdir: Path, uv: str) -> Freshness:
    """Compare the lockfile with the current inputs; offline, reads one file."""
    path = lock_path(lockdir, entry)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        needs = ", ".join(f"{index.name} ({index.url})" for index in entry.indexes)
        return Freshness(entry.name, "missing", f"run `{reproduce_command(entry)}` on a machine that reaches {needs}")
    fields, body = read_header(text)
    current = lock_inputs(entry, uv)
    if "inputs-digest" not in fields or "body-digest" not in fields:
        return Freshness(entry.name, "stale", "no torchyard header: not made by the lock session")
    if fields["body-digest"] != body_digest(body):
        return Freshness(entry.name, "stale", "edited by hand: the body does not match its recorded digest")
    if fields["inputs-digest"] != digest_of(current):
        changed = _changed_inputs(fields.get("inputs", ""), current)
        return Freshness(entry.name, "stale", f"inputs changed: {', '.join(changed)}")
    return Freshness(entry.name, "fresh", str(path))


def require_fresh(entry: Entry, lockdir: Path, uv: str) -> None:
    """Raise unless the entry's lock is fresh: what builds and runs check before anything else."""
    freshness = check_entry(entry, lockdir, uv)
    if freshness.status != "fresh":
        raise StaleLockError(f"entry {entry.name!r}: lock is {freshness.status}: {freshness.detail}")
