"""One function per backend: compile or lower a case's module, run it on each call, time it.

Inputs and outputs are pytrees: device moves go leaf by leaf, runtimes that take flat tensor lists
(ExecuTorch) get the leaves in the exported program's order, and every runner returns each call's
outputs as a flat list of tensor leaves so they compare leaf by leaf.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import os
import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import torch
from torch.utils import _pytree as pytree

from torchyard.inimage.cases import Call, Case, base_backend
from torchyard.inimage.parity.artifacts import ArtifactCache, Unkeyable, artifact_key
from torchyard.inimage.parity.errors import describe_error
from torchyard.inimage.parity.xnnpack_patterns import prime, store_for

T = TypeVar("T")
WARMUP = 2
REPEATS = 7


# One output leaf: a tensor (a Python int or float becomes one, as torch.export makes it), or any other
# value a model returns (None, a bool, a string: an optional head, a flag, a label), compared by equality.
Leaf = torch.Tensor | object


@dataclass
class BackendRun:
    outputs: list[list[Leaf]]
    compile_seconds: float
    run_seconds: float
    artifact: Path | None = None
    notes: dict[str, Any] = field(default_factory=dict)
    latency_ms: float | None = None  # median of REPEATS synchronized calls after WARMUP, first call's inputs


def register_dataclasses(tree: object) -> None:
    """Make every dataclass type in `tree` a pytree node (torch.export needs them registered)."""
    if dataclasses.is_dataclass(tree) and not isinstance(tree, type):
        if type(tree) not in pytree.SUPPORTED_NODES:
            torch.export.register_dataclass(type(tree))
        for item in dataclasses.fields(tree):
            register_dataclasses(getattr(tree, item.name))
    elif isinstance(tree, dict):
        for value in tree.values():
            register_dataclasses(value)
    elif isinstance(tree, list | tuple):
        for value in tree:
            register_dataclasses(value)


def leaves(value: object) -> list[Leaf]:
    """The output's leaves in pytree order: tensors, numbers as tensors, anything else as it is."""
    register_dataclasses(value)
    flat = pytree.tree_leaves(value)
    return [
        torch.tensor(leaf) if isinstance(leaf, int | float) and not isinstance(leaf, bool) else leaf for leaf in flat
    ]


def leaf_paths(value: object) -> list[str]:
    """Each output leaf's path, as a person reads it: `["action"][0]`; "" for a bare tensor."""
    register_dataclasses(value)
    return _paths(value, "")


def _paths(value: object, prefix: str) -> list[str]:
    try:
        flat, _ = pytree.tree_flatten_with_path(value)
    except ValueError:  # a node type registered without key paths (diffusers' BaseOutput): walked one level here
        pass
    else:
        return [prefix + pytree.keystr(path) for path, _ in flat]
    children, context = pytree.SUPPORTED_NODES[type(value)].flatten_fn(value)
    keyed = isinstance(value, Mapping) and isinstance(context, list | tuple) and len(context) == len(children)
    names = list(context) if keyed else list(range(len(children)))
    return [path for name, child in zip(names, children, strict=True) for path in _paths(child, f"{prefix}[{name!r}]")]


def to_device(call: Call, device: torch.device, dtype: torch.dtype | None = None) -> Call:
    """Tensor leaves to `device` (floating ones to `dtype` when given); other leaves unchanged."""
    register_dataclasses((call.args, dict(call.kwargs)))

    def move(value: object) -> object:
        if not isinstance(value, torch.Tensor):
            return value
        if dtype is not None and value.is_floating_point():
            return value.to(dtype=dtype).to(device)  # cast on the CPU first: MPS has no float64 to move
        return value.to(device)

    args, kwargs = pytree.tree_map(move, (call.args, dict(call.kwargs)))
    return Call(tuple(args), kwargs)


def synchronize(device: torch.device) -> None:
    """Wait for the device's queued work, so a timer around it measures the work, not the launch."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "xpu":
        torch.xpu.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


def unavailable_reason(backend: str, device: torch.device) -> str | None:
    """Why `backend` cannot run here (None when it can): what the image lacks, or the wrong device."""
    if backend.startswith("executorch") and importlib.util.find_spec("executorch") is None:
        return "executorch is not installed in this image"
    if backend == "executorch-xnnpack" and device.type != "cpu":
        return "XNNPACK is a CPU backend; this entry targets " + device.type
    if backend == "tensorrt":
        if device.type != "cuda" or torch.version.cuda is None:
            return "Torch-TensorRT needs an NVIDIA CUDA device"
        if importlib.util.find_spec("torch_tensorrt") is None:
            return "torch-tensorrt is not installed in this image"
    return None


def _timed(function: Callable[[], T], device: torch.device) -> tuple[T, float]:
    started = time.perf_counter()
    result = function()
    synchronize(device)
    return result, time.perf_counter() - started


def _run_all(
    invoke: Callable[[Call], object], calls: list[Call], device: torch.device
) -> tuple[list[list[Leaf]], float, float]:
    """Each call once (outputs and total seconds), then the median latency of the first call."""
    outputs, total = [], 0.0
    for call in calls:
        result, seconds = _timed(lambda call=call: invoke(call), device)  # type: ignore[misc]
        outputs.append(leaves(result))
        total += seconds
    for _ in range(WARMUP):
        invoke(calls[0])
    synchronize(device)
    samples = [_timed(lambda: invoke(calls[0]), device)[1] for _ in range(REPEATS)]
    return outputs, total, statistics.median(samples) * 1e3


def _call(function: Callable[..., object]) -> Callable[[Call], object]:
    return lambda call: function(*call.args, **call.kwargs)


def run_eager(
    case: Case, module: torch.nn.Module, calls: list[Call], device: torch.device, workdir: Path
) -> BackendRun:
    with torch.no_grad():
        outputs, seconds, latency = _run_all(_call(module), calls, device)
    return BackendRun(outputs, 0.0, seconds, latency_ms=latency)


def dynamic_shapes(case: Case) -> object:
    return case.dynamic_shapes() if case.dynamic_shapes else None


def export_program(case: Case, module: torch.nn.Module, call: Call) -> torch.export.ExportedProgram:
    return torch.export.export(module, call.args, kwargs=dict(call.kwargs), dynamic_shapes=dynamic_shapes(case))


def lowering_key(
    case: Case, backend: str, module: torch.nn.Module, call: Call, device: torch.device, *, options: dict[str, Any]
) -> str | None:
    """The artifact cache's key for lowering `module` for `call` (None when its code cannot be read)."""
    dtype = next((value.dtype for value in module.state_dict().values() if value.is_floating_point()), torch.float32)
    try:
        return artifact_key(
            case_name=case.name,
            backend=backend,
            options=options,
            module=module,
            inputs=(call.args, dict(call.kwargs)),
            dynamic_shapes=dynamic_shapes(case),
            device=device,
            dtype=dtype,
        )
    except Unkeyable:
        return None


NO_CACHE = ArtifactCache(None)


def run_export(
    case: Case,
    module: torch.nn.Module,
    calls: list[Call],
    device: torch.device,
    workdir: Path,
    *,
    cache: ArtifactCache = NO_CACHE,
) -> BackendRun:
    """torch.export, saved to a .pt2 and loaded back (saving is where no-input programs used to break);
    the .pt2 comes from the artifact cache when nothing that decides it changed."""
    artifact = workdir / f"{case.name}.pt2"
    state: list[str] = []

    def save(path: Path) -> dict[str, Any]:
        torch.export.save(export_program(case, module, calls[0]), path)
        return {}

    def build() -> torch.nn.Module:
        key = lowering_key(case, "export", module, calls[0], device, options={})
        state.append(cache.materialize(key, ".pt2", artifact, save, known=case.known_failure("export"))[1])
        return torch.export.load(artifact).module()

    program, compile_seconds = _timed(build, device)
    with torch.no_grad():
        outputs, seconds, latency = _run_all(_call(program), calls, device)
    return BackendRun(outputs, compile_seconds, seconds, artifact, {"cache": state[0]}, latency_ms=latency)


def inductor_runner(mode: str) -> Runner:
    """torch.compile with inductor, fullgraph, in one of torch.compile's modes."""

    def run_inductor(
        case: Case, module: torch.nn.Module, calls: list[Call], device: torch.device, workdir: Path
    ) -> BackendRun:
        compiled = torch.compile(
            module,
            backend="inductor",
            mode=None if mode == "default" else mode,
            dynamic=case.dynamic_shapes is not None,
            fullgraph=True,
        )
        with torch.no_grad():
            _, compile_seconds = _timed(lambda: _call(compiled)(calls[0]), device)
            outputs, seconds, latency = _run_all(_call(compiled), calls, device)
        return BackendRun(outputs, compile_seconds, seconds, latency_ms=latency)

    return run_inductor


def keyword_order(program: torch.export.ExportedProgram, call: Call) -> list[str]:
    """The order in which the exported program takes the call's keyword inputs."""
    from torch.export._tree_utils import reorder_kwargs

    return list(reorder_kwargs(dict(call.kwargs), program.call_spec.in_spec)) if call.kwargs else []


def flat_inputs(order: list[str], call: Call) -> list[Any]:
    """The call's leaves in the order the exported program takes them (keyword inputs reordered)."""
    kwargs = {name: call.kwargs[name] for name in order}
    return list(pytree.tree_leaves((call.args, kwargs)))


def load_pte(path: Path) -> Callable[[list[Any]], Any]:
    """The `forward` method of a .pte file as ExecuTorch's C++ runtime loads it (`Runtime.load_program`,
    with its default verification).

    `executorch.runtime` is a thin wrapper over the pybindings extension, but importing it imports the
    whole of `executorch.exir` (for a warning class), and dynamo with it: 2.4 s of a 9 s warm run here,
    where every program comes from the cache and nothing is lowered. The extension is what the wrapper
    calls; where a release lays it out otherwise, the wrapper is used."""
    try:
        return load_pte_by_extension(path)
    except (ImportError, AttributeError, TypeError):  # not there, or not called so in this release
        return load_pte_by_runtime(path)


def load_pte_by_extension(path: Path) -> Callable[[list[Any]], Any]:
    from executorch.extension.pybindings import _C as extension

    program = extension._load_program(
        str(path), enable_etdump=False, debug_buffer_size=0,
        program_verification=extension.Verification.InternalConsistency,
    )  # fmt: skip
    forward: Callable[[list[Any]], Any] = program.load_method("forward")  # it keeps its program alive
    return forward


def load_pte_by_runtime(path: Path) -> Callable[[list[Any]], Any]:
    from executorch.runtime import Runtime

    forward: Callable[[list[Any]], Any] = Runtime.get().load_program(path).load_method("forward").execute
    return forward


def run_executorch(
    case: Case,
    module: torch.nn.Module,
    calls: list[Call],
    device: torch.device,
    workdir: Path,
    *,
    xnnpack: bool,
    cache: ArtifactCache = NO_CACHE,
) -> BackendRun:
    """Lowered to a .pte (portable kernels, or XNNPACK-delegated), written to disk and run by ExecuTorch's
    runtime on the CPU whatever the entry's device."""
    artifact = workdir / f"{case.name}-{'xnnpack' if xnnpack else 'portable'}.pte"
    cpu = torch.device("cpu")
    cpu_calls = [to_device(call, cpu) for call in calls]
    module = module.cpu()
    lowered: list[tuple[dict[str, Any], str]] = []

    def lower(path: Path) -> dict[str, Any]:
        # The compiler is imported only to lower: a run whose programs all come from the cache never pays
        # for it (2.4 s here, dynamo included).
        from executorch.exir import to_edge_transform_and_lower

        partitioners: list[Any] = []
        if xnnpack:
            from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner

            # XNNPACK's pattern graphs from the entry's cache, not made again (2.2 s a process here).
            prime(store_for(os.environ))
            partitioners = [XnnpackPartitioner()]
        exported = export_program(case, module, cpu_calls[0])
        program = to_edge_transform_and_lower(exported, partitioner=partitioners)
        path.write_bytes(program.to_executorch().buffer)
        return {"keyword-order": keyword_order(exported, cpu_calls[0])}

    def build() -> Callable[[list[Any]], Any]:
        backend = "executorch-xnnpack" if xnnpack else "executorch-portable"
        options = {"partitioners": ["XnnpackPartitioner"] if xnnpack else []}
        key = lowering_key(case, backend, module, cpu_calls[0], cpu, options=options)
        lowered.append(cache.materialize(key, ".pte", artifact, lower, known=case.known_failure(backend)))
        # The runtime reads the file back: the .pte on disk is what is tested, not an in-memory copy.
        return load_pte(artifact)

    forward, compile_seconds = _timed(build, cpu)
    meta, state = lowered[0]
    order = meta["keyword-order"]

    def invoke(call: Call) -> object:
        return forward(flat_inputs(order, call))

    outputs, seconds, latency = _run_all(invoke, cpu_calls, cpu)
    notes = {"pte_bytes": artifact.stat().st_size, "cache": state}
    return BackendRun(outputs, compile_seconds, seconds, artifact, notes, latency_ms=latency)


# What decides a Torch-TensorRT program beyond the case: its key is made of these, and the compile and the
# save are given these, so the two cannot drift apart.
TENSORRT_PRECISIONS = ("float32",)
TENSORRT_FORMAT = "exported_program"
TENSORRT_OPTIONS = {"enabled_precisions": list(TENSORRT_PRECISIONS), "format": TENSORRT_FORMAT}


def run_tensorrt(
    case: Case,
    module: torch.nn.Module,
    calls: list[Call],
    device: torch.device,
    workdir: Path,
    *,
    cache: ArtifactCache = NO_CACHE,
) -> BackendRun:
    """Torch-TensorRT's ahead-of-time compile; the compiled program, its engines and weights inside, kept in
    the artifact cache (`torch_tensorrt.save` as an exported program) and loaded back on a hit.

    The engines are kept whole, built as a user's would be: Torch-TensorRT's own engine cache stores
    weight-stripped engines and refits them on a hit, which needs refittable engines, and NVIDIA documents
    that a refittable engine can compute otherwise than the one a user ships (TensorRT 11.3 known issue: a
    GEMM bias dropped). The key has everything that decides an engine: the case's code, weights and
    inputs, the torch, torch-tensorrt and tensorrt versions, and the GPU (name, compute capability,
    driver). A miss runs the program it compiled; a hit runs the loaded one, compared the same way. Where
    saving fails, the compiled program is still run and compared, and the cache says why it kept nothing."""
    import torch_tensorrt

    artifact = workdir / f"{case.name}.trt.ep"
    compiled: list[Any] = []
    state: list[str] = []

    def save(path: Path) -> dict[str, Any]:
        program = export_program(case, module, calls[0])
        inputs = {"arg_inputs": list(calls[0].args), "kwarg_inputs": dict(calls[0].kwargs)}
        precisions = {getattr(torch, name) for name in TENSORRT_PRECISIONS}
        compiled.append(torch_tensorrt.dynamo.compile(program, **inputs, enabled_precisions=precisions))
        torch_tensorrt.save(compiled[0], str(path), output_format=TENSORRT_FORMAT, **inputs)
        return {}

    def build() -> Any:
        key = lowering_key(case, "tensorrt", module, calls[0], device, options=TENSORRT_OPTIONS)
        try:
            state.append(cache.materialize(key, ".ep", artifact, save, known=case.known_failure("tensorrt"))[1])
        except Exception as error:
            if not compiled:
                raise  # the compile itself failed: that is the result
            artifact.unlink(missing_ok=True)  # whatever the failed save left is no program
            state.append(f"unsaved: {describe_error(error)}")
            return compiled[0]
        if compiled:  # built here: run what was compiled, as the user's process would
            return compiled[0]
        loaded = torch_tensorrt.load(str(artifact))
        return loaded.module() if hasattr(loaded, "module") else loaded

    program, compile_seconds = _timed(build, device)
    with torch.no_grad():
        outputs, seconds, latency = _run_all(_call(program), calls, device)
    saved = artifact if artifact.is_file() else None
    return BackendRun(outputs, compile_seconds, seconds, saved, {"cache": state[0]}, latency_ms=latency)


Runner = Callable[[Case, torch.nn.Module, list[Call], torch.device, Path], BackendRun]

RUNNERS: dict[str, Runner] = {
    "eager": run_eager,
    "export": run_export,
    "inductor": inductor_runner("default"),
    "executorch-portable": functools.partial(run_executorch, xnnpack=False),
    "executorch-xnnpack": functools.partial(run_executorch, xnnpack=True),
    "tensorrt": run_tensorrt,
}


CACHED = ("export", "executorch-portable", "executorch-xnnpack", "tensorrt")


def runner_for(backend: str, cache: ArtifactCache = NO_CACHE) -> Runner:
    """The runner of a backend name; `inductor:<mode>` is inductor in that torch.compile mode. Backends
    whose artifacts are files (.pt2, .pte, Torch-TensorRT's .ep) take them from `cache` when nothing that
    decides them changed."""
    if base_backend(backend) == "inductor" and ":" in backend:
        return inductor_runner(backend.split(":", 1)[1])
    if backend in CACHED:
        return functools.partial(RUNNERS[backend], cache=cache)  # type: ignore[call-arg]
    return RUNNERS[backend]
