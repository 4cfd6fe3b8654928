"""GitHub Actions glue: the matrix JSON that a workflow feeds to `fromJSON`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from torchyard.accelerators import nox_session
from torchyard.matrix.schema import Entry


def matrix_include(entries: Sequence[Entry], runners: str = "all") -> dict[str, list[dict[str, Any]]]:
    """`{"include": [...]}` with one item per entry: what a job needs to pick a runner and a session, whether
    it runs natively (no Docker steps) and whether its runner locks it. `runners` keeps the entries on
    GitHub's hosted runners ("hosted") or on self-hosted ones ("self-hosted"): a workflow runs a pull
    request's code on the first directly, and on the second only through its approved, sealed job."""
    if runners != "all":
        entries = [
            entry for entry in entries if ("self-hosted" in entry.accelerator.runs_on) == (runners == "self-hosted")
        ]
    return {
        "include": [
            {
                "name": entry.name,
                "accelerator": entry.accelerator.name,
                "runs-on": list(entry.accelerator.runs_on),
                "session": nox_session(entry.accelerator.name),
                "python": entry.python,
                "native": entry.accelerator.native,
                "lock-on-runner": entry.lock_on_runner,
            }
            for entry in entries
        ]
    }
