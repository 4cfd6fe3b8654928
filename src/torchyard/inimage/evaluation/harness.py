"""Evaluate one case on one backend against the CPU reference: the unit every suite reports.

The reference is eager on the CPU in float64 where the model allows it; a model that cannot run in
float64 (hard-coded casts, dtype-fixed buffers, integer inputs cast inside) falls back to float32 on the
CPU at the highest matmul precision, and the result says which reference it used and why. What dtype an
output must have is what eager gives on the device at the run's precision.
"""

from __future__ import annotations

import dataclasses
import math
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch

from torchyard.inimage.cases import Call, Case
from torchyard.inimage.evaluation.backends import NO_CACHE, BackendRun, Chosen, Runner, choose, runner_for
from torchyard.inimage.evaluation.backends.compiled import NOT_COMPILED, NotCompiled
from torchyard.inimage.evaluation.cache.artifacts import ArtifactCache
from torchyard.inimage.evaluation.casts import first_narrowing
from torchyard.inimage.evaluation.errors import RecordedFailure, describe_error, error_types
from torchyard.inimage.evaluation.factory import nondeterministic
from torchyard.inimage.evaluation.metrics import (
    UNBOUNDED,
    Comparison,
    compare_objects,
    compare_statistics,
    compare_values,
)
from torchyard.inimage.evaluation.trees import Leaf, leaf_paths, leaves, opaque, opaque_inputs, to_device
from torchyard.inimage.start.probe import CPU
from torchyard.inimage.start.tolerances import Bounds, Tolerances

Status = Literal["passed", "failed", "error", "skipped"]
REFERENCE_FAILED = "reference: "  # how the reason of a result without a reference begins
FLOAT64 = "float64 on cpu"


@dataclass
class Result:
    case: str
    backend: str
    dtype: str
    status: Status
    reason: str = ""
    comparisons: list[Comparison] = field(default_factory=list)
    compile_seconds: float = 0.0
    # Whether this was the process's first lowering on its backend, which pays the stack's own warm-up (imports,
    # dynamo's first trace): a comparison holds lowering times of the same kind only (None: not lowered here).
    first_lowering: bool | None = None
    run_seconds: float = 0.0
    latency_ms: float | None = None
    artifact: str | None = None
    artifact_bytes: int = 0  # the program file's size as the run left it (what the suites' on-disk rule reads)
    shapes_match: bool = False
    bounds: dict[str, float] = field(default_factory=dict)
    reference: str = ""
    error_types: list[str] = field(default_factory=list)  # the exception's class and bases, for known failures
    error_message: str = ""
    cache: str = ""  # what the artifact cache did: hit, miss, rebuilt, off, unkeyable ("" when no artifact)
    cache_why: str = ""  # why the cache was not used for the case: it could not be keyed, or it opts out
    # The outputs meet what the case's known failure says this backend computes instead (they may meet the
    # case's reference too, where the precision's bounds cannot tell the two apart).
    known_values: bool = False
    # Where a failing backend first leaves the reference (`evaluation.localize`'s `Localization.as_dict()`); None
    # where nothing was localized (it passed, or its failure is known).
    diverges: dict[str, Any] | None = None
    # When the result kept and replayed here was evaluated ("" where this run evaluated it: `result_cache`).
    replayed: str = ""
    # Both outcomes of a failure that passed when evaluated again (`evaluations.again_on_failure`); "" otherwise.
    flaky: str = ""
    # What inductor's and AOTAutograd's own caches did while this result compiled (`compiler_cache_counts`).
    compiler_caches: dict[str, int] = field(default_factory=dict)
    # torch.compile's graphs and graph breaks (their reasons' first lines), as dynamo counted them (None: not compiled)
    graphs: int | None = None
    graph_breaks: int | None = None
    graph_break_reasons: list[str] = field(default_factory=list)
    # Frames dynamo compiled again when a guard failed (a new shape, a Python value that changed), the guards'
    # first lines (None: not compiled)
    recompiles: int | None = None
    recompile_reasons: list[str] = field(default_factory=list)
    # An ExecuTorch delegate's share of the program (`backends.executorch.delegation`; None: no delegate)
    delegation: dict[str, Any] | None = None
    # Dynamo's reason that a call of a compiled backend ran no compiled graph (`backends.compiled`): the result
    # fails, whatever its values, as no compiled code was judged ("" where every call ran compiled code)
    not_compiled: str = ""
    # Why this passing result is not kept for a replay: its evaluation did what cannot be recorded
    # (`cache.record`: a subprocess, ctypes, a socket); "" where it was kept or did not pass
    unkeepable: str = ""
    # A kept verdict evaluated again to audit the result cache (`cache.results.audited`): "same", or what differs
    # ("" where this result was not audited)
    audit: str = ""

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["comparisons"] = [comparison.as_dict() for comparison in self.comparisons]
        return data


@dataclass(frozen=True)
class Reference:
    """Each call's output leaves on the CPU, their paths, the dtypes eager gives on the device, and how
    the reference was made. `error` is set (and the rest empty) when no reference could be made."""

    outputs: list[list[Leaf]]
    paths: list[str]
    expected_dtypes: list[torch.dtype | None]  # None for a leaf that is not a tensor
    kind: str
    error: str = ""
    floors: list[float] = field(default_factory=list)  # per leaf, the magnitude errors are measured against
    # Per leaf, what the run's precision itself moves it by (`training.spread`): its bounds are widened to
    # `spread_factor` times that where it is wider.
    spreads: list[tuple[float, float, float]] = field(default_factory=list)
    spread_factor: float = 0.0
    # Per call and leaf, eager's own (scaled max, rel L2) error at the run's precision on the device against the
    # float64 reference (`own_error`), what the noise rule bounds a backend by; empty where the reference is not
    # finer than the run (float32's, or float64 that eager meets exactly), None for a leaf without one
    noise: list[list[tuple[float, float] | None]] = field(default_factory=list)


def _eager_cpu(
    case: Case, calls: list[Call], dtype: torch.dtype, module: torch.nn.Module | None = None
) -> tuple[list[list[Leaf]], list[str]]:
    module = (case.module() if module is None else module).to(dtype)
    with torch.no_grad():
        results = [module(*call.args, **call.kwargs) for call in (to_device(c, CPU, dtype) for c in calls)]
    return [leaves(result) for result in results], leaf_paths(results[0])


def output_label(name: str) -> str:
    """How a reason names an output: a single tensor's is "output" (not "output output"), a leaf's by its path."""
    return name if name == "output" else f"output {name}"


def case_reference(case: Case, *, device: torch.device, dtype: torch.dtype) -> Reference:
    """The case's reference (`make_reference`) for its own calls; a case whose inputs cannot be made has none."""
    try:
        calls = case.calls()
    except Exception as error:
        return Reference([], [], [], "none", f"the case's inputs cannot be made: {describe_error(error)}")
    return make_reference(case, calls, device=device, dtype=dtype)


def make_reference(case: Case, calls: list[Call], *, device: torch.device, dtype: torch.dtype) -> Reference:
    """float64 on the CPU, else float32 on the CPU (saying why); eager on the device gives the dtypes. A float64
    reference that eager at the run's precision meets exactly is said to be that precision in effect. The
    factory's two models (one for the device, one for the reference) must hold the same weights: where they
    do not, the factory is to blame, not eager, and there is no reference."""
    try:
        # Built first and held while the other is: its memory cannot be handed out again, so an uninitialized
        # weight (torch.empty) is not the same garbage twice by chance.
        again = case.module()
        built = case.fresh_module()
    except Exception as error:
        return Reference([], [], [], "none", f"eager on {device.type} fails: {describe_error(error)}")
    differs = nondeterministic(case.name, built, again)
    if differs:
        return Reference([], [], [], "none", differs)
    unseen = opaque_inputs(calls)
    if unseen:
        return Reference([], [], [], "none", unseen)
    try:
        module = built.to(dtype=dtype).to(device)
        with torch.no_grad():
            first = to_device(calls[0], device, dtype)
            given = module(*first.args, **first.kwargs)
            results = leaves(given)
            expected = [leaf.dtype if isinstance(leaf, torch.Tensor) else None for leaf in results]
    except Exception as error:
        return Reference([], [], [], "none", f"eager on {device.type} fails: {describe_error(error)}")
    unseen = opaque(given, "the model's output ")
    if unseen:
        return Reference([], [], [], "none", unseen)
    try:
        outputs, paths = _eager_cpu(case, calls, torch.float64, again)
        kind = _float64_kind(results, outputs[0], dtype)
        made = _checked(outputs, paths, expected, kind + (_where_it_narrows(case, calls) if kind != FLOAT64 else ""))
    except Exception as float64_error:
        why = describe_error(float64_error)
    else:
        if made.error or kind != FLOAT64 or dtype == torch.float64 or case.compare == "statistics":
            return made
        try:
            noise = own_error(module, calls, made, first=results, device=device, dtype=dtype)
        except Exception:  # a later call that fails eager on the device: the eager backend's result says so
            return made
        return dataclasses.replace(made, noise=noise)
    try:
        outputs, paths = _eager_cpu(case, calls, torch.float32)
    except Exception as error:
        return Reference(
            [], [], [], "none", f"no CPU reference: float64 fails ({why}); float32 fails ({describe_error(error)})"
        )
    kind = f"float32 on cpu (float64 fails: {why})"
    return _checked(outputs, paths, expected, kind + _where_it_narrows(case, calls))


def own_error(
    module: torch.nn.Module,
    calls: list[Call],
    reference: Reference,
    *,
    first: list[Leaf],
    device: torch.device,
    dtype: torch.dtype,
) -> list[list[tuple[float, float] | None]]:
    """Per call and leaf, eager's (scaled max, rel L2) error at `dtype` on `device` against the float64 reference:
    what the precision itself makes of each output (`first`: the first call's outputs, already computed). A leaf
    with no finite error of its own (not a float tensor, a shape that differs, a non-finite value) has None."""
    noise: list[list[tuple[float, float] | None]] = []
    with torch.no_grad():
        for index, expected_leaves in enumerate(reference.outputs):
            if index:
                call = to_device(calls[index], device, dtype)
                got = leaves(module(*call.args, **call.kwargs))
            else:
                got = first
            errors: list[tuple[float, float] | None] = []
            for output, expected in zip(got, expected_leaves, strict=False):
                if not (isinstance(output, torch.Tensor) and isinstance(expected, torch.Tensor)):
                    errors.append(None)
                    continue
                if not output.is_floating_point() and not output.is_complex():
                    errors.append(None)
                    continue
                measured = compare_values(output, expected, output.dtype, UNBOUNDED, "")
                finite = measured.passed and math.isfinite(measured.scaled_max_error + measured.rel_l2_error)
                errors.append((measured.scaled_max_error, measured.rel_l2_error) if finite else None)
            noise.append(errors)
    return noise


def _checked(outputs: list[list[Leaf]], paths: list[str], expected: list[torch.dtype | None], kind: str) -> Reference:
    """The reference, or none where its first call's output holds nothing to compare (`_nothing_finite`)."""
    empty = _nothing_finite(outputs[0], paths)
    return Reference([], [], [], "none", empty) if empty else Reference(outputs, paths, expected, kind)


def _nothing_finite(outputs: list[Leaf], paths: list[str]) -> str:
    """Why the reference holds nothing to compare, where a floating output of eager's is NaN or infinite in every
    element: every backend that computes the same garbage would pass (a mask's -inf in some elements is fine)."""
    for leaf, path in zip(outputs, paths, strict=False):
        if not isinstance(leaf, torch.Tensor) or leaf.layout != torch.strided or not leaf.is_floating_point():
            continue
        if leaf.numel() and not bool(torch.isfinite(leaf).any()):
            what = "NaN" if bool(torch.isnan(leaf).all()) else "NaN or infinite"
            return (
                f"eager's output {path or '(the output)'} is {what} in every element: nothing a backend could be "
                "held to; check the model's weights and inputs"
            )
    return ""


def _where_it_narrows(case: Case, calls: list[Call]) -> str:
    """Where a model given float64 computes in a narrower float (`casts.first_narrowing`), and the remedy; ""
    where that cannot be found."""
    module = case.module().to(torch.float64)
    call = to_device(calls[0], CPU, torch.float64)
    found = first_narrowing(module, lambda model: model(*call.args, **call.kwargs))
    if not found:
        return ""
    return (
        f"; it narrows at {found}: keep that computation in its input's dtype (`x.to(x.dtype)`, not `x.float()`) "
        "to be held to float64"
    )


def _float64_kind(eager: list[Leaf], reference: list[Leaf], dtype: torch.dtype) -> str:
    """The float64 reference's kind, saying where it is the run's precision in effect: every floating output
    of eager at that precision equals it exactly (the model casts to that precision inside `forward`, say),
    and an error of exactly 0 says the reference is no finer than the run."""
    pairs = [
        (ours, theirs)
        for ours, theirs in zip(eager, reference, strict=False)
        if isinstance(ours, torch.Tensor) and isinstance(theirs, torch.Tensor) and ours.is_floating_point()
    ]
    exact = bool(pairs) and all(
        ours.shape == theirs.shape and torch.equal(ours.detach().cpu().to(torch.float64), theirs.to(torch.float64))
        for ours, theirs in pairs
    )
    if dtype == torch.float64 or not exact:
        return FLOAT64
    name = str(dtype).removeprefix("torch.")
    return f"{FLOAT64} ({name} in effect: eager in {name} equals it exactly)"


SHOWN_FAILURES = 3  # leaves out of bounds named in a reason: a training step of a deep model has hundreds


def _excess(comparison: Comparison, bounds: Bounds) -> float:
    """How far past its bounds a leaf is, as a multiple of the bound it misses most."""
    cosine_room = max(1.0 - bounds.min_cosine, 1e-12)
    return max(
        comparison.scaled_max_error / bounds.max_scaled_error if bounds.max_scaled_error else 0.0,
        comparison.rel_l2_error / bounds.max_rel_l2 if bounds.max_rel_l2 else 0.0,
        (1.0 - comparison.cosine) / cosine_room,
    )


def failure_reason(comparisons: Sequence[Comparison], bounds: Bounds) -> str:
    """Each leaf out of bounds with its numbers; past a few, the worst of them first and how many more (each
    one is in parity.json)."""
    failing = [comparison for comparison in comparisons if not comparison.passed]
    if len(failing) > SHOWN_FAILURES:
        failing = sorted(failing, key=lambda comparison: -_excess(comparison, bounds))
    named = "; ".join(
        f"{f'batch {c.batch}, ' if c.batch else ''}{output_label(c.output)}: {c.problem}"
        for c in failing[:SHOWN_FAILURES]
    )
    if len(failing) <= SHOWN_FAILURES:
        return named
    return (
        f"{len(failing)} of {len(comparisons)} outputs out of bounds, the worst first: {named}; and "
        f"{len(failing) - SHOWN_FAILURES} more (parity.json has each)"
    )


def _compare(case: Case, run: BackendRun, reference: Reference, bounds: Any) -> tuple[list[Comparison], bool]:
    labels = case.batch_labels()
    pairs = [
        (labels[batch] if batch < len(labels) else "", batch, position, output, expected)
        for batch, (outputs, expected_leaves) in enumerate(zip(run.outputs, reference.outputs, strict=True))
        for position, (output, expected) in enumerate(zip(outputs, expected_leaves, strict=True))
    ]
    shapes_match = all(
        output.shape == expected.shape
        for _, _, _, output, expected in pairs
        if isinstance(output, torch.Tensor) and isinstance(expected, torch.Tensor)
    )
    comparisons: list[Comparison] = []
    for label, batch, position, output, expected in pairs:
        name = reference.paths[position] if position < len(reference.paths) else str(position)
        if not isinstance(output, torch.Tensor) or not isinstance(expected, torch.Tensor):
            comparison = compare_objects(output, expected, name or "output")
        else:
            want = reference.expected_dtypes[position] if position < len(reference.expected_dtypes) else None
            want = want or expected.dtype
            if case.compare == "statistics":
                comparison = compare_statistics(output, expected, want, name or "output")
            else:
                floor = reference.floors[position] if position < len(reference.floors) else 0.0
                spread = reference.spreads[position] if position < len(reference.spreads) else None
                known = reference.noise[batch] if batch < len(reference.noise) else []
                noise = known[position] if position < len(known) else None
                comparison = compare_values(
                    output, expected, want, bounds, name or "output", floor=floor, spread=spread,
                    spread_factor=reference.spread_factor, noise=noise,
                )  # fmt: skip
        comparisons.append(dataclasses.replace(comparison, batch=label) if label else comparison)
    return comparisons, shapes_match


_LOWERED: set[str] = set()  # the backends this process has run a case on (see `Result.first_lowering`)


def evaluate(
    case: Case,
    backend: str | Chosen,
    *,
    device: torch.device,
    dtype: torch.dtype,
    tolerances: Tolerances,
    workdir: Path,
    reference: Reference | None = None,
    runner: Runner | None = None,
    cache: ArtifactCache | None = None,
    weights: torch.dtype | None = None,
    bounds: Bounds | None = None,
) -> Result:
    """Run `case` on `backend` (by name, or as `choose` resolved it for `device`) and compare; never raises for a
    backend's or a model's own failure.

    `dtype` is the run's precision (its bounds, unless the caller has them: `bounds`); `weights` the module's
    dtype where it differs (a training step keeps float32 master weights under bf16 or fp16 autocast)."""
    chosen = backend if isinstance(backend, Chosen) else choose(backend, device)
    dtype_name = str(dtype).removeprefix("torch.")
    result = Result(case.name, chosen.name, dtype_name, "skipped")
    if not case.applies_to(chosen.name):
        result.reason = f"case {case.name!r} applies to {', '.join(case.backends or ())} only"
        return result
    reason = None if runner is not None else chosen.unavailable
    if reason is not None:
        result.reason = reason
        return result
    if reference is None:
        reference = case_reference(case, device=device, dtype=dtype)
    result.reference = reference.kind
    if reference.error:
        result.status = "error"
        result.reason = f"{REFERENCE_FAILED}{reference.error}"
        return result
    calls = case.calls()
    bounds = bounds or tolerances.bounds(dtype_name, chosen.name, case.tolerances)
    result.bounds = vars(bounds)
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        module = case.fresh_module().to(dtype=weights or dtype).to(device)
        device_calls = [to_device(call, device, weights or dtype) for call in calls]
        before = compiler_cache_counts()
        run = (runner or runner_for(chosen, cache or NO_CACHE))(case, module, device_calls, device, workdir)
        result.compiler_caches = _since(before)
    except NotCompiled as error:
        return _not_compiled(result, error)
    except Exception as error:
        result.status = "error"
        result.reason = describe_error(error)
        result.error_types = error_types(error)
        result.error_message = str(error)
        result.cache = "hit" if isinstance(error, RecordedFailure) else ""
        return result
    _take_timings(result, run, chosen.name)
    result.artifact = str(run.artifact) if run.artifact else None
    result.artifact_bytes = _file_bytes(run.artifact)
    result.cache = str(run.notes.get("cache", ""))
    result.cache_why = str(run.notes.get("cache_why", ""))
    _take_accounting(result, run.notes)
    counts = [len(outputs) for outputs in run.outputs]
    if counts != [len(expected) for expected in reference.outputs]:
        result.status = "failed"
        result.reason = f"output structure differs: {counts} leaves vs {[len(r) for r in reference.outputs]}"
        return result
    result.comparisons, result.shapes_match = _compare(case, run, reference, bounds)
    if all(comparison.passed for comparison in result.comparisons):
        result.status = "passed"
    else:
        result.status = "failed"
        result.reason = failure_reason(result.comparisons, bounds)
    _take_known_values(result, case, calls, run, bounds=bounds, device=device, dtype=dtype)
    return result


def _not_compiled(result: Result, error: NotCompiled) -> Result:
    """A compiled backend's result whose call ran no compiled graph: it fails, with dynamo's reason."""
    result.status, result.not_compiled = "failed", str(error)
    result.reason = f"{NOT_COMPILED}{error}"
    return result


def _take_known_values(
    result: Result,
    case: Case,
    calls: list[Call],
    run: BackendRun,
    *,
    bounds: Any,
    device: torch.device,
    dtype: torch.dtype,
) -> None:
    """Whether the outputs meet what the case's known failure says this backend computes instead."""
    known = case.known_failure(result.backend)
    if known is not None and known.computes is not None:
        result.known_values = _computes_instead(
            case, known.computes, calls, run, bounds=bounds, device=device, dtype=dtype
        )


# The counters dynamo keeps for the compiler's own caches: inductor's compiled graphs (a forward and a backward
# each) and AOTAutograd's joint graphs, which the compile and train suites reuse across runs.
COMPILER_CACHES = {
    "inductor": ("fxgraph_cache_hit", "fxgraph_cache_miss"),
    "aot_autograd": ("autograd_cache_hit", "autograd_cache_miss"),
}


def _take_timings(result: Result, run: BackendRun, backend: str) -> None:
    """How long the lowering and the calls took, and whether this process had lowered on `backend` before."""
    result.compile_seconds, result.run_seconds, result.latency_ms = run.compile_seconds, run.run_seconds, run.latency_ms
    result.first_lowering = backend not in _LOWERED
    _LOWERED.add(backend)


def _take_accounting(result: Result, notes: dict[str, Any]) -> None:
    """torch.compile's graphs, graph breaks and recompilations, where the backend compiled with it; a delegate's
    share."""
    if notes.get("delegation") is not None:
        result.delegation = dict(notes["delegation"])
    if "graph_breaks" in notes:
        result.graphs, result.graph_breaks = int(notes["graphs"]), int(notes["graph_breaks"])
        result.graph_break_reasons = [str(reason) for reason in notes["graph_break_reasons"]]
    if "recompiles" in notes:
        result.recompiles = int(notes["recompiles"])
        result.recompile_reasons = [str(reason) for reason in notes["recompile_reasons"]]


def compiler_cache_counts() -> dict[str, int]:
    """The compiler caches' hits and misses so far in this process (none before dynamo is loaded)."""
    utils = sys.modules.get("torch._dynamo.utils")
    if utils is None:
        return {}
    counters = utils.counters
    return {name: int(counters[group][name]) for group, names in COMPILER_CACHES.items() for name in names}


def _since(before: dict[str, int]) -> dict[str, int]:
    after = compiler_cache_counts()
    return {name: count - before.get(name, 0) for name, count in after.items() if count - before.get(name, 0)}


def _file_bytes(path: Path | None) -> int:
    """A program file's size, where the run left one (a replayed result keeps what its evaluation saw)."""
    try:
        return Path(path).stat().st_size if path else 0
    except OSError:
        return 0


def _computes_instead(
    case: Case,
    computes: Callable[[], torch.nn.Module],
    calls: list[Call],
    run: BackendRun,
    *,
    bounds: Any,
    device: torch.device,
    dtype: torch.dtype,
) -> bool:
    """Whether the backend's outputs meet the reference of the model it is known to compute instead."""
    instead = dataclasses.replace(case, make_module=computes, known_failures={})
    reference = make_reference(instead, calls, device=device, dtype=dtype)
    if reference.error or [len(outputs) for outputs in run.outputs] != [len(r) for r in reference.outputs]:
        return False
    comparisons, _ = _compare(case, run, reference, bounds)
    return all(comparison.passed for comparison in comparisons)
