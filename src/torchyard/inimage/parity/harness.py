"""Evaluate one case on one backend against the float64 reference: the unit every suite reports."""

from __future__ import annotations

import copy
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch

from torchyard.inimage.cases import Case, Inputs
from torchyard.inimage.parity.backends import RUNNERS, BackendRun, Runner, leaves, to_device, unavailable_reason
from torchyard.inimage.parity.metrics import Comparison, compare_statistics, compare_values
from torchyard.inimage.parity.tolerances import Tolerances

Status = Literal["passed", "failed", "error", "skipped"]


@dataclass
class Result:
    case: str
    backend: str
    dtype: str
    status: Status
    reason: str = ""
    comparisons: list[Comparison] = field(default_factory=list)
    compile_seconds: float = 0.0
    run_seconds: float = 0.0
    artifact: str | None = None
    shapes_match: bool = False
    bounds: dict[str, float] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["comparisons"] = [comparison.as_dict() for comparison in self.comparisons]
        return data


def reference_outputs(case: Case, input_sets: list[Inputs]) -> list[list[torch.Tensor]]:
    """Eager in float64 on the CPU, same weights, same inputs."""
    module = case.module().to(torch.float64)
    with torch.no_grad():
        return [leaves(module(*to_device(inputs, torch.device("cpu"), torch.float64))) for inputs in input_sets]


def expected_dtype(reference: torch.Tensor, dtype: torch.dtype) -> torch.dtype:
    """What eager gives at the run's precision: float64 stands for the compute dtype, the rest is kept."""
    if reference.dtype == torch.float64:
        return dtype
    if reference.dtype == torch.complex128:
        return torch.complex64 if dtype == torch.float32 else torch.complex128
    return reference.dtype


def _compare(
    case: Case,
    run: BackendRun,
    reference: list[list[torch.Tensor]],
    *,
    dtype: torch.dtype,
    tolerances: Tolerances,
    backend: str,
) -> tuple[list[Comparison], bool]:
    bounds = tolerances.bounds(str(dtype).removeprefix("torch."), backend)
    if [len(outputs) for outputs in run.outputs] != [len(expected) for expected in reference]:
        return [], False
    pairs = [
        pair
        for outputs, expected in zip(run.outputs, reference, strict=True)
        for pair in zip(outputs, expected, strict=True)
    ]
    shapes_match = all(output.shape == ref.shape for output, ref in pairs)
    comparisons: list[Comparison] = []
    for position, (output, ref) in enumerate(pairs):
        want = expected_dtype(ref, dtype)
        if case.compare == "statistics":
            comparisons.append(compare_statistics(output, list(ref.shape), want, position))
        else:
            comparisons.append(compare_values(output, ref, want, bounds, position))
    return comparisons, shapes_match


def _describe(error: Exception) -> str:
    """One line: the exception, its first message line, and where it was raised."""
    message = str(error).strip().splitlines()
    frame = traceback.extract_tb(error.__traceback__)[-1]
    return f"{type(error).__name__}: {message[0] if message else ''} (at {Path(frame.filename).name}:{frame.lineno})"


def evaluate(
    case: Case,
    backend: str,
    *,
    device: torch.device,
    dtype: torch.dtype,
    tolerances: Tolerances,
    workdir: Path,
    reference: list[list[torch.Tensor]] | None = None,
    runner: Runner | None = None,
) -> Result:
    """Run `case` on `backend` and compare; never raises for a backend's own failure (that is a result)."""
    dtype_name = str(dtype).removeprefix("torch.")
    result = Result(case.name, backend, dtype_name, "skipped")
    reason = None if runner is not None else unavailable_reason(backend, device)
    if reason is not None:
        result.reason = reason
        return result
    result.bounds = vars(tolerances.bounds(dtype_name, backend))
    input_sets = case.input_sets()
    if reference is None:
        reference = reference_outputs(case, input_sets)
    module = copy.deepcopy(case.module()).to(device=device, dtype=dtype)
    device_sets = [to_device(inputs, device, dtype) for inputs in input_sets]
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        run = (runner or RUNNERS[backend])(case, module, device_sets, device, workdir)
    except Exception as error:  # a backend's own failure is the result being reported, not a crash
        result.status = "error"
        result.reason = _describe(error)
        return result
    result.compile_seconds, result.run_seconds = run.compile_seconds, run.run_seconds
    result.artifact = str(run.artifact) if run.artifact else None
    result.comparisons, result.shapes_match = _compare(
        case, run, reference, dtype=dtype, tolerances=tolerances, backend=backend
    )
    if not result.comparisons:
        result.status = "failed"
        result.reason = (
            f"output structure differs: {[len(o) for o in run.outputs]} leaves vs {[len(r) for r in reference]}"
        )
    elif all(comparison.passed for comparison in result.comparisons):
        result.status = "passed"
    else:
        result.status = "failed"
        result.reason = "; ".join(f"output {c.output}: {c.problem}" for c in result.comparisons if not c.passed)
    return result
