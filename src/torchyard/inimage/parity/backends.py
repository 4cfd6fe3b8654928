"""One function per backend: compile or lower a case's module, run it on each input set, time both.

Every runner returns outputs as flat lists of tensors (pytree leaves) so they compare leaf by leaf.
"""

from __future__ import annotations

import importlib.util
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch.utils import _pytree as pytree

from torchyard.inimage.cases import Case, Inputs

BACKENDS = ("eager", "export", "inductor", "executorch-portable", "executorch-xnnpack", "tensorrt")


@dataclass
class BackendRun:
    outputs: list[list[torch.Tensor]]
    compile_seconds: float
    run_seconds: float
    artifact: Path | None = None
    notes: dict[str, Any] = field(default_factory=dict)


def leaves(value: object) -> list[torch.Tensor]:
    flat, _ = pytree.tree_flatten(value)
    return [leaf if isinstance(leaf, torch.Tensor) else torch.tensor(leaf) for leaf in flat]


def to_device(inputs: Inputs, device: torch.device, dtype: torch.dtype | None = None) -> Inputs:
    """Tensors to `device` (floating ones to `dtype` when given); ints and other values unchanged."""

    def move(value: object) -> object:
        if not isinstance(value, torch.Tensor):
            return value
        if dtype is not None and value.is_floating_point():
            return value.to(device=device, dtype=dtype)
        return value.to(device)

    return tuple(move(value) for value in inputs)


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


def _timed(function: Callable[[], object]) -> tuple[object, float]:
    started = time.perf_counter()
    result = function()
    return result, time.perf_counter() - started


def _run_all(
    call: Callable[..., object], input_sets: list[Inputs], device: torch.device
) -> tuple[list[list[torch.Tensor]], float]:
    outputs, total = [], 0.0
    for inputs in input_sets:
        started = time.perf_counter()
        result = call(*inputs)
        seconds = time.perf_counter() - started
        if device.type == "cuda":
            torch.cuda.synchronize()
        outputs.append(leaves(result))
        total += seconds
    return outputs, total


def run_eager(
    case: Case, module: torch.nn.Module, input_sets: list[Inputs], device: torch.device, workdir: Path
) -> BackendRun:
    with torch.no_grad():
        outputs, seconds = _run_all(module, input_sets, device)
    return BackendRun(outputs, 0.0, seconds)


def _export(case: Case, module: torch.nn.Module, inputs: Inputs) -> torch.export.ExportedProgram:
    dynamic = case.dynamic_shapes() if case.dynamic_shapes else None
    return torch.export.export(module, inputs, dynamic_shapes=dynamic)


def run_export(
    case: Case, module: torch.nn.Module, input_sets: list[Inputs], device: torch.device, workdir: Path
) -> BackendRun:
    """torch.export, saved to a .pt2 and loaded back (saving is where no-input programs used to break)."""
    artifact = workdir / f"{case.name}.pt2"

    def build() -> torch.nn.Module:
        torch.export.save(_export(case, module, input_sets[0]), artifact)
        return torch.export.load(artifact).module()

    program, compile_seconds = _timed(build)
    with torch.no_grad():
        outputs, seconds = _run_all(program, input_sets, device)  # type: ignore[arg-type]
    return BackendRun(outputs, compile_seconds, seconds, artifact)


def run_inductor(
    case: Case, module: torch.nn.Module, input_sets: list[Inputs], device: torch.device, workdir: Path
) -> BackendRun:
    compiled = torch.compile(module, backend="inductor", dynamic=case.dynamic_shapes is not None, fullgraph=True)
    with torch.no_grad():
        first, compile_seconds = _timed(lambda: compiled(*input_sets[0]))
        outputs, seconds = _run_all(compiled, input_sets, device)
    del first
    return BackendRun(outputs, compile_seconds, seconds)


def _run_executorch(
    case: Case, module: torch.nn.Module, input_sets: list[Inputs], workdir: Path, xnnpack: bool
) -> BackendRun:
    from executorch.exir import to_edge_transform_and_lower
    from executorch.runtime import Runtime

    partitioners: list[Any] = []
    if xnnpack:
        from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner

        partitioners = [XnnpackPartitioner()]
    artifact = workdir / f"{case.name}-{'xnnpack' if xnnpack else 'portable'}.pte"
    cpu_sets = [to_device(inputs, torch.device("cpu")) for inputs in input_sets]

    def build() -> object:
        program = to_edge_transform_and_lower(_export(case, module.cpu(), cpu_sets[0]), partitioner=partitioners)
        artifact.write_bytes(program.to_executorch().buffer)
        # The runtime reads the file back: the .pte on disk is what is tested, not an in-memory copy.
        return Runtime.get().load_program(artifact).load_method("forward")

    method, compile_seconds = _timed(build)
    outputs, seconds = _run_all(lambda *inputs: method.execute(list(inputs)), cpu_sets, torch.device("cpu"))  # type: ignore[attr-defined]
    return BackendRun(outputs, compile_seconds, seconds, artifact, {"pte_bytes": artifact.stat().st_size})


def run_executorch_portable(
    case: Case, module: torch.nn.Module, input_sets: list[Inputs], device: torch.device, workdir: Path
) -> BackendRun:
    return _run_executorch(case, module, input_sets, workdir, xnnpack=False)


def run_executorch_xnnpack(
    case: Case, module: torch.nn.Module, input_sets: list[Inputs], device: torch.device, workdir: Path
) -> BackendRun:
    return _run_executorch(case, module, input_sets, workdir, xnnpack=True)


def run_tensorrt(
    case: Case, module: torch.nn.Module, input_sets: list[Inputs], device: torch.device, workdir: Path
) -> BackendRun:
    import torch_tensorrt

    def build() -> object:
        program = _export(case, module, input_sets[0])
        return torch_tensorrt.dynamo.compile(
            program, arg_inputs=list(input_sets[0]), enabled_precisions={torch.float32}
        )

    compiled, compile_seconds = _timed(build)
    with torch.no_grad():
        outputs, seconds = _run_all(compiled, input_sets, device)  # type: ignore[arg-type]
    return BackendRun(outputs, compile_seconds, seconds)


Runner = Callable[[Case, torch.nn.Module, list[Inputs], torch.device, Path], BackendRun]

RUNNERS: dict[str, Runner] = {
    "eager": run_eager,
    "export": run_export,
    "inductor": run_inductor,
    "executorch-portable": run_executorch_portable,
    "executorch-xnnpack": run_executorch_xnnpack,
    "tensorrt": run_tensorrt,
}
