"""Resolve an entry with `uv pip compile --generate-hashes` and write its lockfile atomically.

Vendor packages with a pinned version are resolved as metadata-only stand-in wheels at that version
(direct requirements, not overrides, which would silence every other package's constraint on them);
"*" vendor packages are excluded from resolution. Neither is emitted into the lock.
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from torchyard.errors import CommandError, LockError
from torchyard.lock.inputs import LockInputs, compile_args, requirements_in, uv_environment
from torchyard.lock.lockfile import lock_path, render_lockfile
from torchyard.lock.pairs import mismatched_pair
from torchyard.lock.standins import write_wheel
from torchyard.matrix.machine import Source, sources_for
from torchyard.matrix.schema import Entry, Index
from torchyard.util import proc
from torchyard.util.atomic import write_atomically

UV_ERROR_MARKERS = ("error:", "\N{MULTIPLICATION SIGN}")  # uv starts a failure with one or the other


def uv_version(runner: proc.Runner = proc.run) -> str:
    output = runner(["uv", "--version"], capture=True).stdout.split()
    if len(output) < 2:
        raise LockError(f"cannot read uv's version from {' '.join(output)!r}")
    return output[1]


def _uv_explanation(output: str) -> str:
    """uv's own reason and its first hint, condensed to one line (the full text is printed above)."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    hints = [line for line in lines if line.startswith("hint:")]
    for position, line in enumerate(lines):
        marker = next((marker for marker in UV_ERROR_MARKERS if line.startswith(marker)), None)
        if marker is not None:
            rest = [item for item in lines[position + 1 :] if not item.startswith("hint:")][:3]
            return proc.redact(" ".join([line.removeprefix(marker).strip(), *rest, *hints[:1]]))
    return proc.redact(lines[-1]) if lines else "no output"


# uv's chain of causes when a request never got an answer (DNS, refused, timed out), and the URL it asked.
FETCH_FAILED = re.compile(r"Failed to fetch: `?(\S+?)`?$", re.MULTILINE)
NO_ANSWER = ("error sending request", "client error (Connect)", "operation timed out")
UNTRUSTED_CERTIFICATE = ("invalid peer certificate", "certificate verify failed", "UnknownIssuer")


def unreachable_index(output: str, sources: Sequence[Source], indexes: Sequence[tuple[str, str]]) -> str:
    """The index uv could not reach, named as matrix.toml names it (`indexes`, name and URL), with the fix:
    the machine setting that points it elsewhere, the mirror that setting names, or the CA store; "" where uv
    failed otherwise."""
    found = FETCH_FAILED.search(output)
    if found is None or not any(words in output for words in NO_ANSWER):
        return ""
    for source in sources:
        # uv names the URL without its credentials.
        bare = re.sub(r"//[^/@]*@", "//", source.location).rstrip("/") + "/"
        if source.kind != "index" or not found.group(1).startswith(bare):
            continue
        where = proc.redact(source.location)
        if any(words in output for words in UNTRUSTED_CERTIFICATE):
            return (
                f"the index {source.name!r} ({where}) answered with a certificate uv does not trust: "
                "UV_NATIVE_TLS=1 makes uv read this machine's certificate store"
            )
        if (source.name, source.location) not in indexes:
            return (
                f"this machine's mirror of the index {source.name!r} ({where}) is not reachable: mend or drop it "
                "in TORCHYARD_MIRRORS or machine.toml's [mirrors] (docs/how-to/air-gapped.md)"
            )
        return (
            f"the index {source.name!r} ({where}) is not reachable from here: lock where it is, or point it at "
            f'a mirror of it with TORCHYARD_MIRRORS="{source.name}=URL" (docs/how-to/air-gapped.md)'
        )
    return ""


def _stage(inputs: LockInputs, workdir: Path) -> Path | None:
    """Write `requirements.in` (with the vendor stand-ins) and the excludes file; return the latter."""
    standins = [write_wheel(workdir / "vendor", name, version).as_uri() for name, version in inputs.pinned_vendor()]
    (workdir / "requirements.in").write_text(requirements_in(inputs, standins))
    if not inputs.excluded():
        return None
    excludes = workdir / "excludes.txt"
    excludes.write_text("".join(f"{name}\n" for name in inputs.excluded()))
    return excludes


def lock_entry(
    entry: Entry,
    lockdir: Path,
    mirrors: Mapping[str, Source],
    *,
    runner: proc.Runner = proc.run,
    env: Mapping[str, str] = os.environ,
    interpreter: str = sys.executable,
) -> Path:
    """Resolve `entry` with uv and write its lockfile atomically; on any failure nothing is written."""
    inputs = LockInputs.of(entry, uv_version(runner))
    target = lock_path(lockdir, entry)
    with tempfile.TemporaryDirectory(prefix=f"torchyard-lock-{entry.name}-") as scratch:
        workdir = Path(scratch)
        excludes = _stage(inputs, workdir)
        output = workdir / "lock.txt"
        sources = sources_for(tuple(Index(name, url) for name, url in inputs.indexes), mirrors)
        args = compile_args(inputs, sources, output, excludes=excludes, interpreter=interpreter)
        uv_env = {**env, "UV_PYTHON_DOWNLOADS": "never", "UV_NO_PROGRESS": "1", **uv_environment(inputs)}
        try:
            runner(args, cwd=workdir, env=uv_env, capture=True)
        except CommandError as error:
            sys.stderr.write(proc.redact(error.output))
            unreachable = unreachable_index(error.output, sources, inputs.indexes)
            reason = unreachable or f"uv could not lock it: {_uv_explanation(error.output)}"
            raise LockError(f"entry {entry.name!r}: {reason}") from None
        body = output.read_text(encoding="utf-8")
    pins = (line.split()[0] for line in body.splitlines() if "==" in line and line[:1].isalnum())
    mismatch = mismatched_pair(pins, inputs.platform)
    if mismatch:
        raise LockError(f"entry {entry.name!r}: {mismatch}")
    through = [name for name, url in inputs.indexes if name in mirrors and mirrors[name] != Source(name, "index", url)]
    if through:
        shown = ", ".join(f"{name}={proc.redact(mirrors[name].location)}" for name in through)
        print(
            f"entry {entry.name!r}: locked through this machine's mirrors ({shown}): its pins are what they served, "
            "and its lockfile says so",
            file=sys.stderr,
        )
    write_atomically(target, render_lockfile(entry, inputs, body, through))
    return target
