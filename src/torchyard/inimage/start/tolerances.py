"""Tolerances: one data file per dtype x backend, overridable per entry (passed in as JSON)."""

from __future__ import annotations

import json
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, replace
from importlib.resources import files
from typing import Any

FIELDS = {
    "max-scaled-error": "max_scaled_error",
    "max-rel-l2": "max_rel_l2",
    "min-cosine": "min_cosine",
    "noise-factor": "noise_factor",
}


@dataclass(frozen=True)
class Bounds:
    """The bounds an output is held to. `noise_factor` tightens the two error bounds to that many times what
    eager at the run's precision itself makes of the output against float64 (`metrics.noise_bounds`), the
    table's bounds its ceiling; 0 holds the output to the table's bounds alone."""

    max_scaled_error: float
    max_rel_l2: float
    min_cosine: float
    noise_factor: float = 0.0


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
                found = _apply(found, case[key], key, override=True)
        return found

    def as_dict(self) -> dict[str, dict[str, float]]:
        return {key: vars(bounds) for key, bounds in self._table.items()}


def _apply(base: Bounds | None, values: Mapping[str, Any], key: str, *, override: bool = False) -> Bounds:
    """`values` over `base`. An override (an entry's, a case's) that sets a bound and not `noise-factor` holds the
    output to the bounds it gives: a bound loosened for a backend is not tightened again by the noise rule."""
    changes = {}
    for name, value in values.items():
        if name not in FIELDS or not isinstance(value, int | float):
            raise ValueError(f"tolerance {key!r}: unknown or non-numeric field {name!r}")
        changes[FIELDS[name]] = float(value)
    if override and "noise_factor" not in changes:
        changes["noise_factor"] = 0.0
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
        table[key] = _apply(table.get(key) or table.get(f"{dtype}.*"), values, key, override=True)
    return Tolerances(table)
