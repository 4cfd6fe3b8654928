"""A small typed reader over parsed TOML that knows where it is, so errors name the key path.

Every accessor either returns a value of the asked type or raises `ConfigError` with one line:
`<file>: <path> > <key>: expected <what>, got <value>`. `finish()` rejects unknown keys with a
"did you mean" suggestion.
"""

from __future__ import annotations

import datetime as dt
import difflib
import math
from collections.abc import Callable, Iterator
from typing import Any

from torchyard.errors import ConfigError


def one_line(text: str) -> str:
    """Escape control characters (a key or value may hold a newline) so an error stays one line."""
    return "".join(char if char.isprintable() else repr(char)[1:-1] for char in text)


def describe(value: object) -> str:
    """Show a TOML value the way a person wrote it (strings quoted, tables and arrays named)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        shown = one_line(value if len(value) <= 60 else value[:57] + "...")
        return '"' + shown.replace('"', '\\"') + '"'
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dt.date | dt.time):
        return f"the date/time {value.isoformat()}"
    return str(value)


class Table:
    def __init__(self, data: dict[str, Any], file: str, path: tuple[str, ...] = ()) -> None:
        self._data = data
        self._file = file
        self._path = path
        self._seen: set[str] = set()

    def where(self, key: str | None = None) -> str:
        parts = [*self._path, key] if key is not None else list(self._path)
        return " > ".join(parts) if parts else "top level"

    def error(self, key: str | None, message: str) -> ConfigError:
        return ConfigError(one_line(f"{self._file}: {self.where(key)}: {message}"))

    def value(self, key: str, *, required: bool) -> Any:
        """The raw value (any TOML type), or None when absent and not required."""
        return self._get(key, required)

    def _get(self, key: str, required: bool) -> Any:
        self._seen.add(key)
        if key not in self._data:
            if required:
                close = difflib.get_close_matches(key, [k for k in self._data if k not in self._seen], n=1)
                hint = f" (is {close[0]!r} a typo for it?)" if close else ""
                raise self.error(key, f"required key is missing{hint}")
            return None
        return self._data[key]

    def string(self, key: str, *, required: bool = True, default: str | None = None) -> str:
        value = self._get(key, required and default is None)
        if value is None:
            assert default is not None
            return default
        if not isinstance(value, str) or not value.strip():
            raise self.error(key, f"expected a non-empty string, got {describe(value)}")
        return value

    def optional_string(self, key: str) -> str | None:
        value = self._get(key, False)
        if value is None:
            return None
        if not isinstance(value, str) or not value.strip():
            raise self.error(key, f"expected a non-empty string, got {describe(value)}")
        return value

    def string_list(self, key: str, *, required: bool = True, non_empty: bool = False) -> tuple[str, ...] | None:
        value = self._get(key, required)
        if value is None:
            return None
        if not isinstance(value, list):
            raise self.error(key, f"expected an array of strings, got {describe(value)}")
        for position, item in enumerate(value):
            if not isinstance(item, str) or not item.strip():
                raise self.error(f"{key}[{position}]", f"expected a non-empty string, got {describe(item)}")
        if non_empty and not value:
            raise self.error(key, "expected at least one item, got an empty array")
        return tuple(value)

    def boolean(self, key: str, *, default: bool) -> bool:
        value = self._get(key, False)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise self.error(key, f"expected true or false, got {describe(value)}")
        return value

    def number(self, key: str) -> float | None:
        value = self._get(key, False)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value):
            raise self.error(key, f"expected a number, got {describe(value)}")
        return float(value)

    def table(self, key: str, *, required: bool = True) -> Table | None:
        value = self._get(key, required)
        if value is None:
            return None
        if not isinstance(value, dict):
            raise self.error(key, f"expected a table, got {describe(value)}")
        return Table(value, self._file, (*self._path, key))

    def array_of_tables(self, key: str, label: Callable[[int, dict[str, Any]], str]) -> Iterator[Table]:
        """Each table of `[[key]]`, read under the path segment that `label(position, item)` gives."""
        value = self._get(key, True)
        if not isinstance(value, list):
            raise self.error(key, f"expected an array of tables ([[{key}]]), got {describe(value)}")
        for position, item in enumerate(value):
            if not isinstance(item, dict):
                raise self.error(f"{key}[{position}]", f"expected a table, got {describe(item)}")
            yield Table(item, self._file, (*self._path, label(position, item)))

    def names(self) -> list[str]:
        return list(self._data)

    def finish(self) -> None:
        """Reject keys nobody read, suggesting the closest known one."""
        for key in self._data:
            if key not in self._seen:
                known = sorted(self._seen)
                close = difflib.get_close_matches(key, known, n=1)
                hint = f"; did you mean {close[0]!r}?" if close else f" (known keys: {', '.join(known)})"
                raise self.error(key, f"unknown key{hint}")
