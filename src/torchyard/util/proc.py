"""The one subprocess seam: every external command torchyard runs goes through `run`.

It prints `+ cmd` on stderr with secrets redacted, resolves the executable first (on PATH, except for
the tools torchyard installs with itself, such as its pinned uv; a missing tool is one clear line, not a
FileNotFoundError), and turns a non-zero exit into a `CommandError` that says
the cause first (the command itself was echoed above, redacted, and never repeats in the error line).
Callers that need to be tested without real processes take a `Runner` parameter and get `run` by
default; tests pass a fake with the same signature.
"""

from __future__ import annotations

import collections
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Protocol

from torchyard.errors import CommandError, CommandNotFoundError

# Whether a command's merged output is shown as it comes: every line (True), none (False), or the lines a
# filter picks (its other lines are still kept in the tail a failure reads).
Tee = bool | Callable[[str], bool]


class Runner(Protocol):
    def __call__(
        self,
        args: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
        capture: bool = False,
        check: bool = True,
        hint: str = "",
        tee: Tee = False,
    ) -> subprocess.CompletedProcess[str]: ...


class DataRunner(Protocol):
    def __call__(
        self, args: Sequence[str], *, cwd: Path | None = None, stdin: bytes = b"", env: Mapping[str, str] | None = None
    ) -> bytes: ...


SECRET_NAMES = re.compile(r"TOKEN|PASSWORD|PASSWD|SECRET|CREDENTIAL|API_KEY|AUTH", re.IGNORECASE)
USERINFO = re.compile(r"(?P<scheme>\b[a-zA-Z][a-zA-Z0-9+.-]*://)[^/@\s'\"]+@")
QUERY_SECRET = re.compile(
    r"(?P<key>[?&;](?:token|access_token|auth|key|api_key|password|secret|sig|signature|x-amz-signature"
    r"|x-amz-credential|x-amz-security-token)=)[^&\s'\"]+",
    re.IGNORECASE,
)
TAIL_LINES = 400  # enough for BuildKit to print the failing step, its context and its summary


def redact(text: str, env: Mapping[str, str] | None = None) -> str:
    """`text` with URL credentials, secret query parameters and the values of secret-named environment
    variables replaced by `***`: every line torchyard prints or raises passes through here."""
    text = USERINFO.sub(lambda match: f"{match['scheme']}***@", text)
    text = QUERY_SECRET.sub(lambda match: f"{match['key']}***", text)
    for name, value in (env if env is not None else os.environ).items():
        if len(value) >= 6 and SECRET_NAMES.search(name) and value in text:
            text = text.replace(value, "***")
    return text


def format_command(args: Sequence[str]) -> str:
    return redact(shlex.join(args))


def cause(output: str) -> str:
    """The most telling line of a failed command's output: the last error-looking one, else the last."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    for line in reversed(lines):
        if re.search(r"\b(error|failed|denied|not found|no such|refused|unreachable)\b", line, re.IGNORECASE):
            return redact(line)[:400]
    return redact(lines[-1])[:400] if lines else ""


def own_uv() -> str:
    """The uv installed with torchyard (the pinned `uv` package's binary), whatever uv PATH holds: uv's
    version is an input of every lock, so a system uv of another version must not make or check one. Imported
    here: an in-place run, which locks nothing, runs where the uv package is not installed."""
    try:
        from uv import find_uv_bin  # noqa: PLC0415 (see the docstring)

        return find_uv_bin()
    except (ImportError, FileNotFoundError):
        raise CommandNotFoundError(
            "uv: the `uv` package torchyard depends on has no binary in this environment; reinstall torchyard"
        ) from None


# Programs torchyard brings in its own environment: found there, never on PATH.
OWN_PROGRAMS = {"uv": own_uv}


def executable(program: str, search_path: str | None) -> str | None:
    """Where `program` runs from: torchyard's own copy for OWN_PROGRAMS, else the first on `search_path`."""
    own = OWN_PROGRAMS.get(program)
    return own() if own is not None else shutil.which(program, path=search_path)


def run(
    args: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    capture: bool = False,
    check: bool = True,
    hint: str = "",
    tee: Tee = False,
) -> subprocess.CompletedProcess[str]:
    """Run `args`; with `capture`, stdout and stderr come back as text; with `tee`, the merged output is
    shown as it comes (on stderr; a filter shows only the lines it picks) and its last lines kept in `.stdout`
    for the error's cause.

    `env` replaces the environment when given (callers merge `os.environ` themselves, on purpose).
    `hint` is appended to the error message when the executable is missing.
    """
    search_path = (env or os.environ).get("PATH")
    found = executable(args[0], search_path)
    if found is None:
        suffix = f"; {hint}" if hint else ""
        raise CommandNotFoundError(f"{args[0]}: command not found{suffix}")
    print(f"+ {format_command(args)}", file=sys.stderr, flush=True)
    command = [found, *args[1:]]
    if tee:
        completed = _tee(command, env, cwd, (lambda _: True) if tee is True else tee)
    else:
        completed = subprocess.run(
            command, env=None if env is None else dict(env), cwd=cwd, text=True, capture_output=capture, check=False
        )
    if check and completed.returncode != 0:
        output = (completed.stderr or "") if capture else (completed.stdout or "") if tee else ""
        why = cause(output)
        where = f": {why}" if why else " (its output is above)"
        raise CommandError(
            f"{Path(args[0]).name} failed with exit status {completed.returncode}{where}", completed.returncode, output
        )
    return completed


def data(
    args: Sequence[str], *, cwd: Path | None = None, stdin: bytes = b"", env: Mapping[str, str] | None = None
) -> bytes:
    """Run `args` with `stdin` and return its stdout as bytes: for output that is data, not text (git's
    objects, paths in any encoding). A failure is a `CommandError` as with `run`; `env` replaces the
    environment when given."""
    found = executable(args[0], (env or os.environ).get("PATH"))
    if found is None:
        raise CommandNotFoundError(f"{args[0]}: command not found")
    print(f"+ {format_command(args)}", file=sys.stderr, flush=True)
    completed = subprocess.run(
        [found, *args[1:]], cwd=cwd, input=stdin, capture_output=True, check=False, env=dict(env) if env else None
    )
    if completed.returncode != 0:
        why = cause(completed.stderr.decode(errors="replace"))
        raise CommandError(
            f"{Path(args[0]).name} failed with exit status {completed.returncode}{f': {why}' if why else ''}",
            completed.returncode,
            completed.stderr.decode(errors="replace"),
        )
    return completed.stdout


def _tee(
    command: list[str], env: Mapping[str, str] | None, cwd: Path | None, shown: Callable[[str], bool]
) -> subprocess.CompletedProcess[str]:
    tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
    with subprocess.Popen(
        command,
        env=None if env is None else dict(env),
        cwd=cwd,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        errors="replace",
    ) as process:
        assert process.stdout is not None
        for line in process.stdout:
            if shown(line):
                sys.stderr.write(redact(line))
            tail.append(line)
        returncode = process.wait()
    return subprocess.CompletedProcess(command, returncode, "".join(tail), "")
