"""What an ExecuTorch program computes at every node, and which delegate ran it, through ExecuTorch's own
intermediate-output taps (`executorch.devtools.intermediate_output_tap`): each tapped node's value becomes an
output of the lowered program, so values from inside an XNNPACK subgraph come out too. The runtime's ETDump
cannot give those: XNNPACK's build records only timings for the operators it runs (executorch 1.5.1).

The taps lower a copy of the program with extra outputs; the partitioner sees the same graph otherwise, but a
delegate that fused two nodes now has to write out the first, so the tapped program can differ from the one the
parity run tested. The program's outputs are tapped nodes too: where none leaves the bounds, the taps hid the
failure, and the note says so."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import operator
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from torchyard.inimage.evaluation.backends.executorch import Delegate, load_pte

TAPS = "executorch.devtools.intermediate_output_tap"


def no_taps() -> str:
    """Why this ExecuTorch cannot say what its program computes at each node ("" where it can): its taps are
    looked for as a file, without importing ExecuTorch's devtools."""
    found = importlib.util.find_spec("executorch")
    if found is None or not found.submodule_search_locations:
        return "ExecuTorch is not installed"
    folder = Path(next(iter(found.submodule_search_locations))) / "devtools"
    if (folder / "intermediate_output_tap").is_dir() or (folder / "intermediate_output_tap.py").is_file():
        return ""
    return f"ExecuTorch {importlib.metadata.version('executorch')} has no intermediate-output taps ({TAPS})"


@dataclass(frozen=True)
class Lowered:
    """Each tapped node's value from the runtime, by name, and what ran it."""

    values: dict[str, torch.Tensor]
    delegates: dict[str, str]


def _floating_tensor(node: torch.fx.Node) -> bool:
    value = node.meta.get("val")
    return node.op == "call_function" and isinstance(value, torch.Tensor) and value.is_floating_point()


def _delegate_of(graph_module: torch.fx.GraphModule, source: torch.fx.Node) -> str:
    """What computes `source` in the lowered graph: a delegate's backend (its output comes through a `getitem`
    of an `executorch_call_delegate`), else ExecuTorch's portable kernel for its operator."""
    call = source.args[0] if source.target is operator.getitem else None
    if isinstance(call, torch.fx.Node) and call.name.startswith("executorch_call_delegate"):
        lowered = call.args[0]
        assert isinstance(lowered, torch.fx.Node)
        backend = getattr(graph_module, str(lowered.target)).backend_id
        return f"{backend} (delegated subgraph)"
    return "portable kernel"


def lowered_values(
    program: torch.export.ExportedProgram, inputs: Sequence[Any], delegate: Delegate, workdir: Path
) -> Lowered:
    """Tap `program` (in place: an export of its own, as a deep copy of an exported program can fail to verify),
    lower it for `delegate`, write it to a .pte in `workdir`, run it on `inputs` (flat, in the program's order)
    with ExecuTorch's runtime, and read every tapped node's value back."""
    from executorch.devtools.intermediate_output_tap import FULL_TENSOR, strip_taps_, tap_intermediate_outputs_
    from executorch.exir import to_edge_transform_and_lower

    tapped, specs = tap_intermediate_outputs_(program, rules=[(_floating_tensor, FULL_TENSOR)])
    edge = to_edge_transform_and_lower(tapped, partitioner=delegate.partitioners())
    graph_module = edge.exported_program().graph_module
    outputs = list(graph_module.graph.output_node().args[0])
    delegates = {spec.node_name: _delegate_of(graph_module, outputs[spec.output_index].args[0]) for spec in specs}
    strip_taps_(edge)
    path = workdir / "localize-tapped.pte"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(edge.to_executorch().buffer)
    flat = list(load_pte(path)(list(inputs)))
    return Lowered({spec.node_name: flat[spec.output_index] for spec in specs}, delegates)
