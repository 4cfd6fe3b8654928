"""What one sample of one operator did on one backend, in the suite's words, and how an error says which."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from torchyard.inimage.evaluation.harness import Result

OutcomeName = Literal[
    "passed", "wrong value", "failed to export", "failed to lower", "failed to run", "crashed", "not supported",
    "set aside",
]  # fmt: skip

# Errors (by class name, matched against the class and its bases) that say a backend does not take the
# operator at all, rather than that it tried and failed: dynamo's refusal to trace it, and an operator
# that has no implementation there.
UNSUPPORTED = frozenset({"Unsupported", "NotImplementedError"})
# Errors raised while a backend compiles, for the backends that keep no file to tell compiling from running.
COMPILING = frozenset({"TorchDynamoException", "BackendCompilerFailed", "InductorError", "LoweringException"})


@dataclass(frozen=True)
class Outcome:
    """One (operator, sample, backend): its outcome, the error's first line or what was wrong, and the metrics
    of a wrong value (the worst output's)."""

    operator: str
    sample: int
    backend: str
    outcome: OutcomeName
    detail: str = ""
    metrics: dict[str, float] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def first_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[0] if lines else ""


def phase_of_error(
    error_types: list[str], *, exported: bool | None, artifact_written: bool, keeps_file: bool
) -> OutcomeName:
    """Which step failed: the export (`exported` False: the sample's module did not export; None where the
    backend does not export), the lowering, or the run. A backend that keeps a file has lowered once the file
    is written; one that keeps none (inductor, eager) compiled where the error is one of its compiler's."""
    if any(name in UNSUPPORTED for name in error_types):
        return "not supported"
    if exported is False:
        return "failed to export"
    if keeps_file:
        return "failed to run" if artifact_written else "failed to lower"
    return "failed to lower" if any(name in COMPILING for name in error_types) else "failed to run"


def metrics_of(result: Result) -> dict[str, float]:
    """The worst compared output's metrics (finite, so that they write as JSON and TOML)."""
    failing = [comparison for comparison in result.comparisons if not comparison.passed] or result.comparisons
    if not failing:
        return {}
    worst = max(failing, key=lambda comparison: comparison.scaled_max_error)
    values = {
        "max_abs_error": worst.max_abs_error,
        "scaled_max_error": worst.scaled_max_error,
        "rel_l2_error": worst.rel_l2_error,
        "cosine": worst.cosine,
    }
    return {name: value if math.isfinite(value) else 1e308 for name, value in values.items()}
