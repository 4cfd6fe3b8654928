"""Tolerances: one data file per dtype x backend, overridable per entry (passed in as JSON)."""

from __future__ import annotations

import json
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, replace
from importlib.resources import files
from typing import Any

FIELDS = {"max-scaled-error": "max_scaled_error", "max-rel-l2": "max_rel_l2", "min-cosine": "min_cosine"}


@dataclass(frozen=True)
class Bounds:
    max_scaled_error: float
    max_rel_l2: float
    min_cosine: float


class Tolerances:
    def __init__(self, table: Mapping[str, Bounds]) -> None:
        self._table = dict(table)

    def bounds(self, dtype: str, backend: str, case: Mapping[str, Mapping[str, float]] | None = None) -> Bounds:
        """The bounds for `dtype` on `backend`; a compile mode (`inductor:<mode>`) uses inductor's, and a
        case's own overrides (same keys) apply last, field by field."""
        keys = (f"{dtype}.{backend}", f"{dtype}.{backend.split(':', 1)[0]}", f"{dtype}.*")
        found = next((self._table[key] for key in keys if key in self._table), None)
        if found is None:
            raise KeyError(f"no tolerance for {dtype}.{backend} (and no {dtype}.* default)")
        for key in reversed(keys):
            if case and key in case:
                found = _apply(found, case[key], key)
        return found

    def as_dict(self) -> dict[str, dict[str, float]]:
        return {key: vars(bounds) for key, bounds in self._table.items()}


def _apply(base: Bounds | None, values: Mapping[str, Any], key: str) -> Bounds:
    changes = {}
    for name, value in values.items():
        if name not in FIELDS or not isinstance(value, int | float):
            raise ValueError(f"tolerance {key!r}: unknown or non-numeric field {name!r}")
        changes[FIELDS[name]] = float(value)
    if base is None:
        return Bounds(**changes)
    return replace(base, **changes)


def load_tolerances(overrides_json: str = "") -> Tolerances:
    """The built-in table with the entry's overrides (JSON `{"float32.inductor": {"max-rel-l2": 1e-4}}`)."""
    text = files("torchyard.inimage.start").joinpath("tolerances.toml").read_text(encoding="utf-8")
    table: dict[str, Bounds] = {key: _apply(None, values, key) for key, values in tomllib.loads(text).items()}
    overrides: dict[str, Any] = json.loads(overrides_json) if overrides_json else {}
    for key, given in overrides.items():
        values = {name: value for name, value in given.items() if value is not None}
        dtype = key.split(".", 1)[0]
        table[key] = _apply(table.get(key) or table.get(f"{dtype}.*"), values, key)
    return Tolerances(table)
