"""What passes, per suite: the one place each suite's rule is written, which the suites, the self-tests and
the mutation session (`nox -s mutants`) all go through (`passes`).

- export: the exported program ran with the eager output's shapes, and was saved and loaded (a file).
- compile: the compiled module ran with the eager output's shapes (its values are parity's to judge).
- runtime: the lowered program loaded and ran with the eager output's shapes, from a file on disk
  (where the program runs from memory and its file is only kept, TensorRT's engines, running is enough).
- aot: the AOTInductor package ran with the eager output's shapes, loaded from a file on disk.
- parity: the outputs met the reference within the precision's bounds.
- train: the step's loss, gradients, parameters, optimizer state and buffers met the float64 step's."""

from __future__ import annotations

from typing import assert_never

from torchyard.inimage.parity.backends import BACKENDS
from torchyard.inimage.parity.harness import Result, output_label
from torchyard.names import SuiteName

# The backends whose program runs from memory: the file they keep is not what the runtime suite tests.
FROM_MEMORY = frozenset(
    name for name, backend in BACKENDS.items() if backend.ARTIFACT is not None and not backend.ARTIFACT.loaded
)


def ran(result: Result) -> bool:
    """The backend produced outputs of the reference's shapes, whatever their values."""
    return result.status in ("passed", "failed") and result.shapes_match


def on_disk(result: Result) -> bool:
    """The program was saved to a file that holds something, as the run left it (`Result.artifact_bytes`, so
    a replayed result is judged as its evaluation was)."""
    return result.artifact is not None and bool(result.artifact_bytes)


# Each suite's rule in words, for a pass the reader could otherwise take for a failure.
RULES: dict[SuiteName, str] = {
    "export": "the exported program ran with eager's output shapes, saved and loaded back",
    "compile": "the compiled module ran with eager's output shapes",
    "runtime": "the program loaded and ran with eager's output shapes",
    "parity": "every output within its bounds",
    "train": "every leaf of the step within its bounds",
}
SHOWN_RULES = 3  # leaves that passed by a rule, named in a reason (the rest counted)


def pass_reason(suite: SuiteName, result: Result) -> str:
    """What a pass of `result` in `suite` rests on, where its own reason would not say: a suite that does not
    judge values names its rule and leaves the values that missed to the parity suite; a comparison that
    passed by a rule other than the plain bounds (a small leaf's) names it. "" for a plain pass."""
    if suite in ("export", "compile", "runtime") and result.status == "failed":
        return f"passes the {suite} rule ({RULES[suite]}); its values are the parity suite's to judge: {result.reason}"
    ruled = sorted(  # the largest errors first: the ones that look like failures in the table's columns
        (comparison for comparison in result.comparisons if comparison.passed and comparison.rule),
        key=lambda comparison: -comparison.scaled_max_error,
    )
    if not ruled:
        return ""
    named = "; ".join(
        f"{output_label(comparison.output)} by the {comparison.rule}" for comparison in ruled[:SHOWN_RULES]
    )
    more = f"; and {len(ruled) - SHOWN_RULES} more" if len(ruled) > SHOWN_RULES else ""
    return f"passes, {len(ruled)} of its outputs by a rule of their own: {named}{more}"


def passes(suite: SuiteName, result: Result) -> bool:
    """Whether `result` passes `suite` (before known failures are applied: `outcomes.conclude` does that)."""
    match suite:
        case "parity" | "train":
            return result.status == "passed"
        case "compile":
            return ran(result)
        case "export" | "aot":
            return ran(result) and on_disk(result)
        case "runtime":
            return ran(result) and (result.backend in FROM_MEMORY or on_disk(result))
        case "ops":  # judged sample by sample against its expectations file (ops.outcomes), never here
            raise ValueError("the ops suite's outcomes are ops.outcomes' to judge")
        case _:
            assert_never(suite)
