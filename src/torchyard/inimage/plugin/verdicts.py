"""The predicates each suite's rule is made of (each suite's own module writes its rule, `passes`, from them), which
the suites, the self-tests and the mutation session (`nox -s mutants`) all go through; and what a pass rests on.

- export: the exported program ran with the eager output's shapes, and was saved and loaded (a file).
- compile: the compiled module ran compiled code on every call, with the eager output's shapes (its values are
  parity's to judge).
- runtime: the lowered program loaded and ran with the eager output's shapes, from a file on disk
  (where the program runs from memory and its file is only kept, TensorRT's engines, running is enough).
- aot: the AOTInductor package ran with the eager output's shapes, loaded from a file on disk.
- parity: the outputs met the reference within the precision's bounds.
- train: the step's loss, gradients, parameters, optimizer state and buffers met the float64 step's."""

from __future__ import annotations

from torchyard.inimage.evaluation.backends import BACKENDS
from torchyard.inimage.evaluation.harness import Result, output_label
from torchyard.names import SHAPE_SUITES, SuiteName

# The backends whose program runs from memory: the file they keep is not what the runtime suite tests.
FROM_MEMORY = frozenset(
    name for name, backend in BACKENDS.items() if backend.ARTIFACT is not None and not backend.ARTIFACT.loaded
)


def ran(result: Result) -> bool:
    """The backend produced outputs of the reference's shapes, whatever their values, from its own program: a
    compiled backend's calls each ran compiled code (`Result.not_compiled`)."""
    return result.status in ("passed", "failed") and result.shapes_match and not result.not_compiled


def on_disk(result: Result) -> bool:
    """The program was saved to a file that holds something, as the run left it (`Result.artifact_bytes`, so
    a replayed result is judged as its evaluation was)."""
    return result.artifact is not None and bool(result.artifact_bytes)


SHOWN_RULES = 3  # leaves that passed by a rule, named in a reason (the rest counted)


def within_bounds(result: Result) -> bool:
    """Every output (or every leaf of a training step) met the float64 reference within its bounds: the
    precision's per backend (`start/tolerances.toml`, the entry's `tolerances` over them) or a rule of its own."""
    return result.status == "passed"


def from_memory(result: Result) -> bool:
    """The backend's program runs from memory and its file is only kept (TensorRT's engines): the file is not
    what the runtime suite tests."""
    return result.backend in FROM_MEMORY


def pass_reason(suite: SuiteName, result: Result, rule: str) -> str:
    """What a pass of `result` in `suite` rests on, where its own reason would not say: a suite that does not
    judge values names its rule and leaves the values that missed to the parity suite; a comparison that
    passed by a rule other than the plain bounds (a small leaf's) names it. "" for a plain pass."""
    if suite in SHAPE_SUITES and result.status == "failed":
        return f"passes the {suite} rule ({rule}); its values are the parity suite's to judge: {result.reason}"
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
