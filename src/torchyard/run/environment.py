"""An entry's settings as the contract's environment variables, the same for a container and a venv."""

from __future__ import annotations

from dataclasses import fields

from torchyard import contract
from torchyard.matrix.schema import Entry


def tolerance_overrides(entry: Entry) -> dict[str, dict[str, float | None]]:
    """The entry's tolerance overrides as the in-image plugin reads them (as JSON)."""
    return {
        tolerance.key: {
            "max-scaled-error": tolerance.max_scaled_error,
            "max-rel-l2": tolerance.max_rel_l2,
            "min-cosine": tolerance.min_cosine,
            "noise-factor": tolerance.noise_factor,
        }
        for tolerance in entry.tolerances
    }


def entry_environment(entry: Entry, report_dir: str) -> dict[str, str]:
    """The variables of every setting that comes from an entry field (`contract.SETTINGS`), each field as it is
    but the accelerator, by name, and the tolerances, as the plugin's overrides."""
    values = {field.name: getattr(entry, field.name) for field in fields(entry)}
    values |= {"accelerator": entry.accelerator.name, "tolerances": tolerance_overrides(entry)}
    return contract.suite_environment(values, entry.options, report_dir=report_dir)
