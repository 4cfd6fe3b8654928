"""Localization on failure: where a failing backend's program first leaves the reference, node by node.

The case's first call runs through its exported program twice with `torch.fx.Interpreter`, in float64 (the
reference for every intermediate) and, for the export backend, in the run's dtype; an ExecuTorch backend's
values come from its own runtime through taps (`localize.executorch`). The first node whose value leaves the
harness's bounds, with its inputs within them, is named with its operator, source line and delegate. inductor
fuses nodes into kernels and keeps no intermediate: there torch's compiler bisector names the step instead
(`localize.inductor`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from torchyard.inimage.cases import Call, Case
from torchyard.inimage.evaluation.backends import Chosen, choose
from torchyard.inimage.evaluation.backends.executorch import ExecuTorch, flat_inputs, keyword_order
from torchyard.inimage.evaluation.backends.protocol import Localizes
from torchyard.inimage.evaluation.backends.running import export_program
from torchyard.inimage.evaluation.errors import describe_error
from torchyard.inimage.evaluation.harness import FLOAT64, Result
from torchyard.inimage.evaluation.localize.deadline import Deadline, GaveUp
from torchyard.inimage.evaluation.localize.executorch import lowered_values, no_taps
from torchyard.inimage.evaluation.localize.inductor import bisect_compile, bisect_train
from torchyard.inimage.evaluation.localize.nodes import eager_differs, first_divergence, node_values
from torchyard.inimage.evaluation.localize.result import NOT_LOCALIZED, Localization, NodeDivergence
from torchyard.inimage.evaluation.trees import to_device
from torchyard.inimage.start.probe import CPU
from torchyard.inimage.start.tolerances import Bounds, Tolerances
from torchyard.names import LOCALIZE_SECONDS_DEFAULT

TIME_BOUND = float(LOCALIZE_SECONDS_DEFAULT)  # seconds, where the entry sets none
NO_DIVERGENCE = "no node leaves the bounds on the case's first call"
HIDDEN = " (its outputs included: where the parity run failed, the taps changed what was lowered)"


class TracedOtherwise(Exception):
    """The exported program itself computes other values than the model: torch.export is to blame."""


def localizes(backend: str) -> bool:
    """Whether `localize` can say where `backend` diverges: a node (export, ExecuTorch), or a compiler step
    (inductor, in any mode)."""
    return choose(backend).localizes is not None


def localize(
    case: Case,
    backend: str | Chosen,
    *,
    dtype: torch.dtype,
    tolerances: Tolerances,
    workdir: Path,
    device: torch.device = CPU,
    time_bound: float = TIME_BOUND,
    batch: int = 0,
    bounds: Bounds | None = None,
) -> Localization:
    """Where `backend` (by name, or as `choose` resolved it) first diverges from the float64 reference on the
    case's call `batch` (its first; the failing batch from a file) (ExecuTorch and export on the CPU, inductor on
    `device`), within `bounds` (the case's, unless the caller has them); never raises for the model's or the
    backend's failure: the note says what happened."""
    deadline = Deadline(time_bound)
    chosen = backend if isinstance(backend, Chosen) else choose(backend)
    how, name = chosen.localizes, chosen.name
    if how is None:
        return Localization(name, None, 0, 0.0, f"localization covers export, ExecuTorch and inductor, not {name}")
    if how == "lowered nodes" and no_taps():
        return Localization(name, None, 0, 0.0, NOT_LOCALIZED + no_taps())
    bounds = bounds or tolerances.bounds(str(dtype).removeprefix("torch."), name, case.tolerances)
    node, compared, step, kind = None, 0, "", ""
    try:
        if how == "compiler steps":
            step = bisect_compile(
                case, chosen.mode, device=device, dtype=dtype, bounds=bounds, deadline=deadline, batch=batch
            )
        else:
            node, compared, kind = _first_node(
                case, chosen, dtype=dtype, bounds=bounds, workdir=workdir, deadline=deadline, batch=batch
            )
    except GaveUp as stage:
        note = f"gave up after {deadline.elapsed:.0f} s (time bound {time_bound:g} s), before {stage}"
        return Localization(name, None, compared, deadline.elapsed, note)
    except TracedOtherwise as differs:
        note = f"the exported program already differs from the model, before any lowering: {differs}"
        return Localization(name, None, compared, deadline.elapsed, note)
    except Exception as error:
        return Localization(name, None, compared, deadline.elapsed, f"localization failed: {describe_error(error)}")
    note = _nothing_found(how, node, step)
    if batch and note:
        note = note.replace("the case's first call", f"its batch {case.batch_labels()[batch]}")
    return Localization(name, node, compared, deadline.elapsed, note, step, kind)


def localize_failure(
    case: Case,
    result: Result,
    chosen: Chosen,
    bounds: Bounds,
    *,
    dtype: torch.dtype,
    tolerances: Tolerances,
    workdir: Path,
    device: torch.device,
    time_bound: float,
) -> Localization | None:
    """Where a failing result's backend diverges, for a failure no known failure explains: a known wrong value
    says already what the backend computes, and a random program's statistics have no node to blame (None then,
    and where the backend cannot be localized). On the batch that failed first: a batch from a file can fail
    where the random one passes."""
    known = case.known_failure(result.backend)
    named = known is not None and bool(known.node)  # a known wrong value that names its node: it is checked
    if result.status != "failed" or result.not_compiled or (result.known_values and not named):
        return None  # a result whose calls ran eagerly has no compiled step to look for
    if case.compare != "values":
        return None
    if chosen.localizes is None:
        return None
    labels = case.batch_labels()
    failing = next((c.batch for c in result.comparisons if not c.passed and c.batch), "")
    return localize(
        case, chosen, bounds=bounds, dtype=dtype, tolerances=tolerances, workdir=workdir, device=device,
        time_bound=time_bound, batch=labels.index(failing) if failing in labels else 0,
    )  # fmt: skip


def localize_train(backend: str, correct: Callable[[], bool], *, time_bound: float = TIME_BOUND) -> Localization:
    """Where a compiled training step (`train-inductor-*`) diverges: the compiler step torch's bisector names,
    `correct` taking the step afresh and saying whether it meets the float64 step. A training step's forward and
    backward graphs are AOTAutograd's, with no exported program to walk node by node: the bisector answers alone."""
    deadline = Deadline(time_bound)
    try:
        step = bisect_train(correct, deadline)
    except GaveUp as stage:
        note = f"gave up after {deadline.elapsed:.0f} s (time bound {time_bound:g} s), before {stage}"
        return Localization(backend, None, 0, deadline.elapsed, note)
    except Exception as error:
        return Localization(backend, None, 0, deadline.elapsed, f"localization failed: {describe_error(error)}")
    note = "" if step else "the bisector found no compiler step that breaks the training step"
    return Localization(backend, None, 0, deadline.elapsed, note, step)


def _nothing_found(how: Localizes, node: NodeDivergence | None, step: str) -> str:
    if node is not None or step:
        return ""
    if how == "compiler steps":
        return "the bisector found no compiler step that breaks the case's first call"
    return NO_DIVERGENCE + (HIDDEN if how == "lowered nodes" else "")


def _first_node(
    case: Case, chosen: Chosen, *, dtype: torch.dtype, bounds: Bounds, workdir: Path, deadline: Deadline, batch: int
) -> tuple[NodeDivergence | None, int, str]:
    """The first node out of bounds on call `batch`, how many were compared, and the reference's kind."""
    module = case.fresh_module().to(dtype).cpu().eval()
    call = to_device(case.calls()[batch], CPU, dtype)
    program = export_program(case, module, call)
    inputs = flat_inputs(keyword_order(program, call), call)
    deadline.check("the reference")
    reference, kind = _reference(program, case, call, inputs, bounds)
    deadline.check(f"running {chosen.name}")
    delegates: dict[str, str] = {}
    found = chosen.backend
    if isinstance(found, ExecuTorch):  # "lowered nodes": its runtime's taps
        tapped = export_program(case, module, call)  # the taps change it in place
        if [node.name for node in tapped.graph.nodes] != [node.name for node in program.graph.nodes]:
            raise RuntimeError("exporting the case again named its nodes otherwise")
        lowered = lowered_values(tapped, inputs, found.delegate, workdir)
        candidate, delegates = lowered.values, lowered.delegates
    else:
        candidate = node_values(program, inputs, dtype)
    deadline.check("comparing")
    return (*first_divergence(program.graph, candidate, reference, bounds, delegates), kind)


def _reference(
    program: torch.export.ExportedProgram, case: Case, call: Call, inputs: list[Any], bounds: Bounds
) -> tuple[dict[str, torch.Tensor], str]:
    """Every node's value in float64, else (a model that casts inside, as the harness's reference falls back) in
    float32; raises `TracedOtherwise` where the exported program's outputs are not the model's."""
    try:
        values, kind, dtype = node_values(program, inputs, torch.float64), FLOAT64, torch.float64
    except Exception as error:
        values, dtype = node_values(program, inputs, torch.float32), torch.float32
        kind = f"float32 on cpu (float64 fails: {describe_error(error)})"
    # A model of its own: eager_differs casts it in place (copy.deepcopy cannot copy every model).
    differs = eager_differs(program, case.fresh_module().cpu().eval(), call, bounds, dtype)
    if differs:
        raise TracedOtherwise(differs)
    return values, kind


__all__ = ["TIME_BOUND", "Localization", "NodeDivergence", "localize", "localize_failure", "localizes"]
