"""How a backend's error is described and matched, fresh or read back from the artifact cache."""

from __future__ import annotations

import traceback
from pathlib import Path


class RecordedFailure(Exception):
    """A lowering's known failure read back from the artifact cache: the same key (code, weights,
    inputs, versions, device) failed this way in an earlier run, so it is not lowered again only to fail
    again. It carries what the fresh error had: its class and bases by name, its message, its one line."""

    def __init__(self, types: list[str], message: str, description: str) -> None:
        super().__init__(message)
        self.types, self.message, self.description = types, message, description


def error_types(error: BaseException) -> list[str]:
    """The exception's class and its bases, by name (what a known failure's `raises` is matched against)."""
    if isinstance(error, RecordedFailure):
        return list(error.types)
    return [klass.__name__ for klass in type(error).__mro__]


def describe_error(error: BaseException) -> str:
    """One line: the exception, its first message line, and where it was raised."""
    if isinstance(error, RecordedFailure):
        return f"{error.description} (recorded by an earlier run of this same lowering)"
    message = str(error).strip().splitlines()
    frames = traceback.extract_tb(error.__traceback__)
    where = f" (at {Path(frames[-1].filename).name}:{frames[-1].lineno})" if frames else ""
    return f"{type(error).__name__}: {message[0] if message else ''}{where}"
