"""The known outcomes of the ops suite for one stack and accelerator, kept as data (a TOML file per stack,
written by `--collect-expectations`), and what a run's outcomes change against them.

As `test_torchinductor_opinfo`'s expected-failure tables: only what is not a pass is written (an operator's
sample on a backend, and what a rule set aside); everything else is expected to pass. A run fails on any
difference: a new wrong value or failure, an outcome of another kind, a known failure that now passes
(PyTorch's FAIL_ON_SUCCESS), and an expectation for a sample and backend the run ran that it did not meet."""

from __future__ import annotations

import importlib.metadata
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from torchyard.inimage.ops.outcomes import Outcome
from torchyard.opsfile import PASSED, STACK_DISTRIBUTIONS, file_name, render, sample_key

__all__ = ["PASSED", "Expectations", "differences", "file_name", "load", "render", "rows", "sample_key"]

HERE = Path(__file__).parent / "expectations"


@dataclass(frozen=True)
class Expectations:
    stack: Mapping[str, str | int] = field(default_factory=dict)
    set_aside: Mapping[str, str] = field(default_factory=dict)  # operator, or "operator#sample" -> the rule
    outcomes: Mapping[tuple[str, str], tuple[str, str]] = field(default_factory=dict)  # (op#sample, backend)


def installed_version(distribution: str) -> str | None:
    """The distribution's release (its local label, `+cpu`, left out), or None where it is not installed."""
    try:
        return importlib.metadata.version(distribution).split("+", 1)[0]
    except importlib.metadata.PackageNotFoundError:
        return None


def stack_identity(accelerator: str, precision: str) -> dict[str, str]:
    """What names a stack's file: the accelerator, the precision, and the stack's versions."""
    identity = {"accelerator": accelerator, "precision": precision}
    for name in STACK_DISTRIBUTIONS:
        version = installed_version(name)
        if version is not None:
            identity[name] = version
    return identity


def load(path: Path) -> Expectations:
    """The file's expectations; none where there is no file (every outcome is then expected to pass)."""
    if not path.is_file():
        return Expectations()
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    outcomes = {
        (key, backend): (str(value["outcome"]), str(value.get("detail", "")))
        for key, backends in data.get("outcomes", {}).items()
        for backend, value in backends.items()
    }
    return Expectations(data.get("stack", {}), data.get("set-aside", {}), outcomes)


def rows(outcomes: Iterable[Outcome]) -> list[tuple[str, int, str, str, str]]:
    """The outcomes as the file's rows (`opsfile.render`)."""
    return [
        (outcome.operator, outcome.sample, outcome.backend, outcome.outcome, outcome.detail) for outcome in outcomes
    ]


def differences(expected: Expectations, operator: str, set_aside: str, outcomes: Sequence[Outcome]) -> list[str]:
    """Each way the operator's outcomes in this run differ from the expectations, in words (none: as expected).
    Only what the run covered counts: its backends, and the samples it took of this operator (a sample each
    backend ran is compared on each, so an expected failure that did not happen is a difference there)."""
    found = []
    if set_aside or operator in expected.set_aside:
        known = expected.set_aside.get(operator, "")
        if set_aside != known:
            found.append(f"{operator}: set aside by rule {set_aside!r}, expected {known or 'to run'!r}")
        return found
    for outcome in outcomes:
        key = sample_key(operator, outcome.sample)
        if outcome.outcome == "set aside":
            if key not in expected.set_aside:
                found.append(f"{operator} sample {outcome.sample}: set aside ({outcome.detail}), expected to run")
            continue
        if key in expected.set_aside:
            found.append(f"{operator} sample {outcome.sample}: runs, expected set aside ({expected.set_aside[key]})")
            continue
        want, _ = expected.outcomes.get((key, outcome.backend), (PASSED, ""))
        if outcome.outcome != want:
            what = f"{outcome.outcome}: {outcome.detail}" if outcome.detail else outcome.outcome
            if want != PASSED and outcome.outcome == PASSED:
                what = "passed: a known failure no longer fails, remove it (--collect-expectations)"
            found.append(f"{operator} sample {outcome.sample} on {outcome.backend}: {what}; expected {want}")
    return found
