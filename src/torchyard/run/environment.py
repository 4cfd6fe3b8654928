"""An entry's settings as the contract's environment variables, the same for a container and a venv."""

from __future__ import annotations

import json

from torchyard import contract
from torchyard.matrix.schema import Entry


def tolerance_overrides(entry: Entry) -> str:
    """The entry's tolerance overrides as the JSON the in-image plugin reads."""
    return json.dumps(
        {
            tolerance.key: {
                "max-scaled-error": tolerance.max_scaled_error,
                "max-rel-l2": tolerance.max_rel_l2,
                "min-cosine": tolerance.min_cosine,
            }
            for tolerance in entry.tolerances
        },
        sort_keys=True,
    )


def entry_environment(entry: Entry, report_dir: str) -> dict[str, str]:
    return contract.suite_environment(
        accelerator=entry.accelerator.name,
        precision=entry.precision,
        report_dir=report_dir,
        suites=entry.suites,
        tolerances_json=tolerance_overrides(entry),
        cases=entry.cases,
        builtin_cases=entry.builtin_cases,
        compile_modes=entry.compile_modes,
    )
