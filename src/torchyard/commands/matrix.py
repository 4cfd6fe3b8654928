"""GitHub Actions glue: the matrix JSON that a workflow feeds to `fromJSON`."""

from __future__ import annotations

import tomllib
from collections.abc import Sequence
from functools import cache
from importlib.resources import files
from typing import Any, Literal

from torchyard.accelerators import nox_session
from torchyard.matrix.schema import Entry

Runners = Literal["all", "hosted", "self-hosted"]
RUNNERS: tuple[Runners, ...] = ("all", "hosted", "self-hosted")


@cache
def hosted_labels() -> frozenset[str]:
    """GitHub's hosted-runner labels (package data, with its source)."""
    text = files("torchyard.commands").joinpath("hosted_runners.toml").read_text(encoding="utf-8")
    return frozenset(tomllib.loads(text)["labels"])


def is_hosted(runs_on: Sequence[str]) -> bool:
    """Whether `runs_on` gets a GitHub-hosted runner: one label, from GitHub's list. A self-hosted runner takes
    any job whose labels it has, `self-hosted` or not, so everything else counts as self-hosted."""
    return len(runs_on) == 1 and runs_on[0] in hosted_labels()


def matrix_include(entries: Sequence[Entry], runners: Runners = "all") -> dict[str, list[dict[str, Any]]]:
    """`{"include": [...]}` with one item per entry: what a job needs to pick a runner and a session, whether
    it runs natively (no Docker steps) and whether its runner locks it. `runners` keeps the entries on
    GitHub's hosted runners ("hosted") or on self-hosted ones ("self-hosted"): a workflow runs a pull
    request's code on the first directly, and on the second only through its approved, sealed job.

    In an untrusted run the entries come through the trust gate (`torchyard.matrix.gate`): their labels are
    the trusted matrix.toml's, or the run was refused."""
    kept = list(entries)
    if runners != "all":
        kept = [entry for entry in kept if is_hosted(entry.accelerator.runs_on) == (runners == "hosted")]
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
            for entry in kept
        ]
    }
