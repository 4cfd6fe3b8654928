"""GitHub Actions glue: the matrix JSON that a workflow feeds to `fromJSON`."""

from __future__ import annotations

import tomllib
from collections.abc import Mapping, Sequence
from functools import cache
from importlib.resources import files
from pathlib import Path
from typing import Any, Literal

from torchyard.accelerators import nox_session
from torchyard.image.policy import TRUSTED_MATRIX_ENV
from torchyard.matrix.load import load_plan
from torchyard.matrix.schema import Entry
from torchyard.trust import resolve_trust

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


def trusted_runs_on(env: Mapping[str, str]) -> Mapping[str, tuple[str, ...]] | None:
    """In an untrusted run with TORCHYARD_TRUSTED_MATRIX set, each accelerator's runs-on as that trusted
    matrix.toml has it: a pull request's matrix.toml never chooses where its code runs. None otherwise."""
    path = env.get(TRUSTED_MATRIX_ENV)
    if not path or resolve_trust(None, env).trusted:
        return None
    return {accelerator.name: accelerator.runs_on for accelerator in load_plan(Path(path)).accelerators}


def matrix_include(
    entries: Sequence[Entry], runners: Runners = "all", trusted: Mapping[str, tuple[str, ...]] | None = None
) -> dict[str, list[dict[str, Any]]]:
    """`{"include": [...]}` with one item per entry: what a job needs to pick a runner and a session, whether
    it runs natively (no Docker steps) and whether its runner locks it. `runners` keeps the entries on
    GitHub's hosted runners ("hosted") or on self-hosted ones ("self-hosted"): a workflow runs a pull
    request's code on the first directly, and on the second only through its approved, sealed job.

    `trusted` (see `trusted_runs_on`) replaces each entry's runs-on with its accelerator's trusted labels;
    an entry whose accelerator the trusted matrix lacks is left out, until the change is trusted."""
    labels = {entry.name: entry.accelerator.runs_on for entry in entries}
    if trusted is not None:
        labels = {entry.name: trusted[entry.accelerator.name] for entry in entries if entry.accelerator.name in trusted}
    kept = [entry for entry in entries if entry.name in labels]
    if runners != "all":
        kept = [entry for entry in kept if is_hosted(labels[entry.name]) == (runners == "hosted")]
    return {
        "include": [
            {
                "name": entry.name,
                "accelerator": entry.accelerator.name,
                "runs-on": list(labels[entry.name]),
                "session": nox_session(entry.accelerator.name),
                "python": entry.python,
                "native": entry.accelerator.native,
                "lock-on-runner": entry.lock_on_runner,
            }
            for entry in kept
        ]
    }
