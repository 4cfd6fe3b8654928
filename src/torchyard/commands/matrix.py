"""GitHub Actions glue: the matrix JSON that a workflow feeds to `fromJSON`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from torchyard.accelerators import nox_session
from torchyard.matrix.schema import Entry


def matrix_include(entries: Sequence[Entry]) -> dict[str, list[dict[str, Any]]]:
    """`{"include": [...]}` with one item per entry: what a job needs to pick a runner and a session, and
    whether it runs natively (no Docker steps)."""
    return {
        "include": [
            {
                "name": entry.name,
                "accelerator": entry.accelerator.name,
                "runs-on": list(entry.accelerator.runs_on),
                "session": nox_session(entry.accelerator.name),
                "python": entry.python,
                "native": entry.accelerator.native,
            }
            for entry in entries
        ]
    }
