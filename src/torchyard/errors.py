"""Typed errors: the one place that maps a failure to an exit status.

`cli.main()` catches `TorchyardError`, prints its one-line message on stderr and exits with its
`exit_code`; anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

from typing import ClassVar


class TorchyardError(Exception):
    """A failure the user can act on: printed as one line, never as a traceback."""

    exit_code: ClassVar[int] = 1


class ConfigError(TorchyardError):
    """matrix.toml (or a user config file) is malformed; the message names the file and key path."""

    exit_code = 2


class UsageError(TorchyardError):
    """The command line asks for something that does not exist (an unknown entry, say)."""

    exit_code = 2


class CommandNotFoundError(TorchyardError):
    """An executable torchyard needs is not on PATH."""

    exit_code = 127


class CommandError(TorchyardError):
    """A subprocess exited non-zero; the message names the command and its status."""

    def __init__(self, message: str, returncode: int, output: str = "") -> None:
        super().__init__(message)
        self.returncode = returncode
        self.output = output


class LockError(TorchyardError):
    """A lock could not be made (resolution failed, index unreachable) or is not fresh."""


class StaleLockError(TorchyardError):
    """`lock --check` found locks that are stale or missing."""


class DockerUnavailableError(TorchyardError):
    """No Docker engine answers, or no client that can build with BuildKit."""

    exit_code = 3


class ImageBuildError(TorchyardError):
    """An image cannot be built: a precondition failed before any layer, or the build itself failed."""


class DeviceUnavailableError(TorchyardError):
    """An entry's accelerator runtime is missing on this host; running would silently test the CPU."""

    exit_code = 3
