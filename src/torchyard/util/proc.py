"""The one subprocess seam: every external command torchyard runs goes through `run`.

It prints `+ cmd` on stderr, resolves the executable on PATH first (a missing tool is one clear line,
not a FileNotFoundError), and turns a non-zero exit into a `CommandError` naming the command.
Callers that need to be tested without real processes take a `Runner` parameter and get `run` by
default; tests pass a fake with the same signature.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Protocol

from torchyard.errors import CommandError, CommandNotFoundError


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
    ) -> subprocess.CompletedProcess[str]: ...


def format_command(args: Sequence[str]) -> str:
    return shlex.join(args)


def run(
    args: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    capture: bool = False,
    check: bool = True,
    hint: str = "",
) -> subprocess.CompletedProcess[str]:
    """Run `args`; with `capture`, stdout and stderr come back as text (stderr merged into `.stderr`).

    `env` replaces the environment when given (callers merge `os.environ` themselves, on purpose).
    `hint` is appended to the error message when the executable is missing.
    """
    search_path = (env or os.environ).get("PATH")
    executable = shutil.which(args[0], path=search_path)
    if executable is None:
        suffix = f"; {hint}" if hint else ""
        raise CommandNotFoundError(f"{args[0]}: command not found{suffix}")
    print(f"+ {format_command(args)}", file=sys.stderr, flush=True)
    completed = subprocess.run(
        [executable, *args[1:]],
        env=None if env is None else dict(env),
        cwd=cwd,
        text=True,
        capture_output=capture,
        check=False,
    )
    if check and completed.returncode != 0:
        output = (completed.stderr or "") if capture else ""
        raise CommandError(
            f"command failed with exit status {completed.returncode}: {format_command(args)}",
            completed.returncode,
            output,
        )
    return completed
