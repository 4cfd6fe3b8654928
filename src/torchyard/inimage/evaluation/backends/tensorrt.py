"""Torch-TensorRT's ahead-of-time compile, on NVIDIA CUDA devices."""

from __future__ import annotations

import importlib.util
import operator
from pathlib import Path
from typing import Any, Literal

import torch

from torchyard.inimage.evaluation.backends.protocol import Artifact, BackendRun, Job, Localizes
from torchyard.inimage.evaluation.backends.running import called, export_program, lowering_key, run_all, timed
from torchyard.inimage.evaluation.errors import describe_error

NAME: Literal["tensorrt"] = "tensorrt"
# The compiled program runs from memory; the file keeps its engines for later runs, and saving may fail.
ARTIFACT = Artifact(".ep", loaded=False)
EXPORTS = True
FIRST_USE: tuple[str, ...] = ()
LOCALIZES: Localizes | None = None

# What decides a Torch-TensorRT program beyond the case: its key is made of these, and the compile and the
# save are given these, so the two cannot drift apart.
PRECISIONS = ("float32",)
FORMAT = "exported_program"
OPTIONS = {"enabled_precisions": list(PRECISIONS), "format": FORMAT}


def unavailable(device: torch.device) -> str | None:
    if device.type != "cuda" or torch.version.cuda is None:
        return "Torch-TensorRT needs an NVIDIA CUDA device"
    if importlib.util.find_spec("torch_tensorrt") is None:
        return "torch-tensorrt is not installed in this image"
    return None


def run(job: Job) -> BackendRun:
    """The compiled program, its engines and weights inside, kept in the artifact cache (`torch_tensorrt.save`
    as an exported program) and loaded back on a hit.

    The engines are kept whole, built as a user's would be: Torch-TensorRT's own engine cache stores
    weight-stripped engines and refits them on a hit, which needs refittable engines, and NVIDIA documents
    that a refittable engine can compute otherwise than the one a user ships (TensorRT 11.3 known issue: a
    GEMM bias dropped). The key has everything that decides an engine: the case's code, weights and
    inputs, the torch, torch-tensorrt and tensorrt versions, and the GPU (name, compute capability,
    driver). A miss runs the program it compiled; a hit runs the loaded one, compared the same way. Where
    saving fails, the compiled program is still run and compared, and the cache says why it kept nothing."""
    import torch_tensorrt

    case, module, calls, device, cache = job.case, job.module, job.calls, job.device, job.cache
    artifact = job.workdir / f"{case.name}.trt{ARTIFACT.suffix}"
    compiled: list[Any] = []
    state: list[dict[str, str]] = []

    def save(path: Path) -> dict[str, Any]:
        program = export_program(case, module, calls[0])
        inputs = {"arg_inputs": list(calls[0].args), "kwarg_inputs": dict(calls[0].kwargs)}
        precisions = {getattr(torch, name) for name in PRECISIONS}
        compiled.append(torch_tensorrt.dynamo.compile(program, **inputs, enabled_precisions=precisions))
        torch_tensorrt.save(compiled[0], str(path), output_format=FORMAT, **inputs)
        return {}

    def build() -> Any:
        key = lowering_key(case, NAME, module, calls[0], device, options=OPTIONS)
        try:
            _, done = cache.materialize(key.digest, ARTIFACT.suffix, artifact, save, known=case.known_failure(NAME))
            state.append(key.notes(done))
        except Exception as error:
            if not compiled:
                raise  # the compile itself failed: that is the result
            artifact.unlink(missing_ok=True)  # whatever the failed save left is no program
            state.append({"cache": f"unsaved: {describe_error(error)}"})
            return compiled[0]
        if compiled:  # built here: run what was compiled, as the user's process would
            return compiled[0]
        loaded = torch_tensorrt.load(str(artifact))
        return loaded.module() if hasattr(loaded, "module") else loaded

    program, compile_seconds = timed(build, device)
    with torch.no_grad():
        outputs, seconds, latency = run_all(called(program), calls, device)
    saved = artifact if artifact.is_file() else None
    notes = {**state[0], "delegation": engines(program)}
    return BackendRun(outputs, compile_seconds, seconds, saved, notes, latency_ms=latency)


def engines(program: Any) -> dict[str, Any] | None:
    """What Torch-TensorRT built and what it left to PyTorch, as its own partition names them: in the compiled
    module, each `_run_on_acc_*` child an engine and the operators of each `_run_on_gpu_*` child PyTorch's; in a
    loaded program (engines inlined as `tensorrt.execute_engine` calls), every other call PyTorch's. None where
    the module has neither shape: torchyard's note, never the result's failure."""
    try:
        children = dict(program.named_children())
        built: list[Any] = [name for name in children if name.startswith("_run_on_acc")]
        left = [
            node
            for name, child in children.items()
            if name.startswith("_run_on_gpu") and isinstance(child, torch.fx.GraphModule)
            for node in child.graph.nodes
            if node.op == "call_function"
        ]
        if not built:
            calls = [node for node in program.graph.nodes if node.op == "call_function"]
            built = [node for node in calls if "execute_engine" in str(node.target)]
            left = [node for node in calls if node not in built]
        operators = [str(node.target) for node in left if node.target is not operator.getitem]
        return {
            "subgraphs": len(built),
            "non-delegated-nodes": len(operators),
            "left-out": sorted(set(operators)),
            "left-to": "PyTorch",
        }
    except Exception:  # an accounting the result's verdict does not depend on
        return None
