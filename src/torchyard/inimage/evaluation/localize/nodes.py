"""Every node's value in an exported program, by name, through `torch.fx.Interpreter`: in float64 the
reference for each intermediate, in the run's dtype what the unlowered program computes. The first node whose
value leaves the bounds is where a lowering diverges: every node before it, its inputs included, is within."""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from torchyard.inimage.cases import Call
from torchyard.inimage.evaluation.localize.result import NodeDivergence
from torchyard.inimage.evaluation.metrics import compare_values
from torchyard.inimage.evaluation.trees import leaves, to_device
from torchyard.inimage.start.tolerances import Bounds

TORCH_FILES = str(Path(torch.__file__).parent)
FRAME = re.compile(r'File "([^"]+)", line (\d+), in (\S+)')  # a Python traceback's frame line


class _Recorder(torch.fx.Interpreter):
    def __init__(self, module: torch.fx.GraphModule) -> None:
        super().__init__(module)
        self.values: dict[str, torch.Tensor] = {}

    def run_node(self, node: torch.fx.Node) -> Any:
        value = super().run_node(node)
        if node.op == "call_function" and isinstance(value, torch.Tensor):
            self.values[node.name] = value.detach()
        return value


def as_dtype(inputs: Sequence[Any], dtype: torch.dtype) -> list[Any]:
    return [value.to(dtype) if isinstance(value, torch.Tensor) and value.is_floating_point() else value
            for value in inputs]  # fmt: skip


def node_values(
    program: torch.export.ExportedProgram, inputs: Sequence[Any], dtype: torch.dtype
) -> dict[str, torch.Tensor]:
    """Each tensor-valued call's output, by node name, with the program's weights and floating `inputs` (flat,
    in the program's order) in `dtype`."""
    module = copy.deepcopy(program.module()).to(dtype)
    assert isinstance(module, torch.fx.GraphModule)
    recorder = _Recorder(module)
    with torch.no_grad():
        recorder.run(*as_dtype(inputs, dtype), enable_io_processing=False)
    return recorder.values


def eager_differs(
    program: torch.export.ExportedProgram, module: torch.nn.Module, call: Call, bounds: Bounds, dtype: torch.dtype
) -> str:
    """Why the exported program itself computes other values than the model, both in `dtype` ("" when it does
    not): then no lowering is to blame, and every node of it meets its own run in `dtype`. `module` is cast in
    place: a model no one else holds."""
    exported = copy.deepcopy(program.module()).to(dtype)
    eager = module.to(dtype)
    wide = to_device(call, torch.device("cpu"), dtype)
    with torch.no_grad():
        traced, expected = leaves(exported(*wide.args, **wide.kwargs)), leaves(eager(*wide.args, **wide.kwargs))
    problems = [
        f"output {position}: {comparison.problem}"
        for position, (ours, theirs) in enumerate(zip(traced, expected, strict=False))
        if isinstance(ours, torch.Tensor) and isinstance(theirs, torch.Tensor)
        for comparison in [compare_values(ours, theirs, ours.dtype, bounds, str(position))]
        if not comparison.passed
    ]
    return "; ".join(problems)


def source_line(node: torch.fx.Node) -> str:
    """The model's own line in the node's stack trace: its last frame outside torch (the last frame is often
    inside `nn.Linear`), else its last frame."""
    frames = FRAME.findall(str(node.meta.get("stack_trace") or ""))
    own = [frame for frame in frames if not frame[0].startswith(TORCH_FILES)] or frames
    if not own:
        return ""
    path, line, function = own[-1]
    return f"{Path(path).name}:{line} in {function}"


def first_divergence(
    graph: torch.fx.Graph,
    candidate: Mapping[str, torch.Tensor],
    reference: Mapping[str, torch.Tensor],
    bounds: Bounds,
    delegates: Mapping[str, str] | None = None,
) -> tuple[NodeDivergence | None, int]:
    """The first node, in the graph's order, whose candidate value leaves `bounds` around its reference, and how
    many nodes were compared. In topological order every input of that node was compared before it and passed,
    or is a placeholder (an input or a weight, exact on both sides)."""
    errors = {}
    for node in graph.nodes:
        if node.name not in candidate or node.name not in reference:
            continue
        value, expected = candidate[node.name], reference[node.name]
        error = compare_values(value, expected, value.dtype, bounds, node.name)
        errors[node.name] = error
        if error.passed:
            continue
        inputs = tuple((item.name, errors[item.name]) for item in node.all_input_nodes if item.name in errors)
        delegate = (delegates or {}).get(node.name, "")
        return NodeDivergence(node.name, str(node.target), source_line(node), error, inputs, delegate), len(errors)
    return None, len(errors)
