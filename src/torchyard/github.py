"""GitHub Actions glue: the matrix JSON that a workflow feeds to `fromJSON`, and the step summary."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from torchyard.accelerators import nox_session
from torchyard.matrix.schema import Entry


def matrix_include(entries: Sequence[Entry]) -> dict[str, list[dict[str, Any]]]:
    """`{"include": [...]}` with one item per entry: what a job needs to pick a runner and a session."""
    return {
        "include": [
            {
                "name": entry.name,
                "accelerator": entry.accelerator.name,
                "runs-on": list(entry.accelerator.runs_on),
                "session": nox_session(entry.accelerator.name),
                "python": entry.python,
            }
            for entry in entries
        ]
    }


def append_step_summary(markdown: str, env: Mapping[str, str] = os.environ) -> bool:
    """Append to `$GITHUB_STEP_SUMMARY` when a workflow set it; returns whether it did."""
    summary = env.get("GITHUB_STEP_SUMMARY")
    if not summary:
        return False
    with Path(summary).open("a", encoding="utf-8") as handle:
        handle.write(markdown.rstrip("\n") + "\n\n")
    return True
