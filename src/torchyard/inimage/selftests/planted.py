"""Backends and models with planted faults, for the self-tests that show the harness catches them."""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
import torch._decomp
import torch.nn.functional as F

from torchyard import contract
from torchyard.inimage.cases import Call, Case
from torchyard.inimage.cases.builtin import CASES
from torchyard.inimage.evaluation.backends import BackendRun, Runner
from torchyard.inimage.evaluation.harness import Result, evaluate
from torchyard.inimage.evaluation.trees import Leaf, leaves
from torchyard.inimage.start.probe import CPU, torch_device
from torchyard.inimage.start.tolerances import load_tolerances

# The run's own device (the probe checked it is there), for the self-tests that must hold on it.
RUN_ACCELERATOR = os.environ.get(contract.ACCELERATOR, "cpu")
RUN_DEVICE = torch_device(RUN_ACCELERATOR)
TOLERANCES = load_tolerances()
BY_NAME = {case.name: case for case in CASES}


Transform = Callable[[Any], Any]  # one output leaf: a tensor, or what else the case returns


def on_cpu(case: Case, runner: Runner, workdir: Path) -> Result:
    return evaluate(
        case, "planted", device=CPU, dtype=torch.float32, tolerances=TOLERANCES, workdir=workdir, runner=runner
    )


def planted(transform: Transform) -> Runner:
    """A backend that runs eager, then passes each output through `transform`."""

    def runner(
        case: Case, module: torch.nn.Module, calls: list[Call], device: torch.device, workdir: Path
    ) -> BackendRun:
        with torch.no_grad():
            outputs = [[transform(leaf) for leaf in leaves(module(*call.args, **call.kwargs))] for call in calls]
        return BackendRun(outputs, 0.0, 0.0)

    return runner


def run_planted(case_name: str, transform: Transform, tmp_path: Path) -> Result:
    return on_cpu(BY_NAME[case_name], planted(transform), tmp_path)


class Switch(torch.nn.Module):
    """Eager-correct; `wrong` changes the output when traced (compiled or exported), or only when exported:
    "scale" by 1e-3, "nan", or "shape" (one column fewer).

    Under torch.compile, torch 2.11's dynamo answers `is_exporting()` with True (2.14 answers False), so
    "compiled and not exported" cannot be told apart there: the compile fault fires under any trace, and
    only the inductor backend is checked with it."""

    def __init__(self, when: str, wrong: str) -> None:
        super().__init__()
        self.when, self.wrong = when, wrong
        self.linear = torch.nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        output: torch.Tensor = self.linear(x)
        active = torch.compiler.is_exporting() if self.when == "export" else torch.compiler.is_compiling()
        if active:
            wrong = {"scale": lambda: output * (1 + 1e-3), "nan": lambda: output + float("nan")}
            return wrong.get(self.wrong, lambda: output[..., :-1])()
        return output


def computing(make: Callable[[], torch.nn.Module], scale: float = 1.0) -> Runner:
    """A backend that gives what another model (same seed, so same weights) computes, times `scale`."""

    def runner(
        case: Case, module: torch.nn.Module, calls: list[Call], device: torch.device, workdir: Path
    ) -> BackendRun:
        dtype = next(module.parameters()).dtype
        other = dataclasses.replace(case, make_module=make).module().to(dtype)
        with torch.no_grad():
            outputs: list[list[Leaf]] = [
                [
                    leaf * scale if isinstance(leaf, torch.Tensor) else leaf
                    for leaf in leaves(other(*call.args, **call.kwargs))
                ]
                for call in calls
            ]
        program = workdir / "program.bin"  # as a runtime's lowered program lies on disk
        program.write_bytes(b"program")
        return BackendRun(outputs, 0.0, 0.0, artifact=program)

    return runner


class Deep(torch.nn.Module):
    """Six layers, each a Linear and then an activation of its own, so each activation is one node of the
    exported program: `silu`, in the middle, is the one `wrong_decomposition` plants a fault in."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(16, 16) for _ in range(6))
        self.activations: tuple[Callable[[torch.Tensor], torch.Tensor], ...] = (
            torch.relu,
            torch.tanh,
            F.silu,
            F.hardswish,
            F.elu,
            F.softplus,
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer, activation in zip(self.layers, self.activations, strict=True):
            x = activation(layer(x))
        return x


@contextlib.contextmanager
def wrong_decomposition(op: torch._ops.OpOverload, wrong: Callable[..., torch.Tensor]) -> Iterator[None]:
    """`op` decomposed as `wrong` while this lasts: torch.export keeps `op` whole (so the exported program and
    eager are right) and ExecuTorch's `to_edge` decomposes it through torch's table, patched here: a wrong
    kernel in the lowered program only."""
    table = torch._decomp.decomposition_table
    assert op in table, f"torch {torch.__version__} has no decomposition for {op} to patch"
    right, table[op] = table[op], wrong
    try:
        yield
    finally:
        table[op] = right


def wrong_tanh_pass() -> Any:
    """A post-grad pass of inductor's that scales every tanh's output by 1.01: a wrong pass under torch.compile,
    set with `torch._inductor.config.patch(post_grad_custom_post_pass=wrong_tanh_pass())`."""
    # Imported here: it imports inductor, a second or more that the self-tests that never compile must not pay.
    from torch._inductor.custom_graph_pass import CustomGraphPass

    class WrongTanhPass(CustomGraphPass):
        def __call__(self, graph: torch.fx.Graph) -> None:
            for node in list(graph.nodes):
                if node.op == "call_function" and node.target is torch.ops.aten.tanh.default:
                    with graph.inserting_after(node):
                        scaled = graph.call_function(torch.ops.aten.mul.Tensor, (node, 1.01))
                    node.replace_all_uses_with(scaled)
                    scaled.args = (node, 1.01)

        def uuid(self) -> str:
            return "torchyard-planted-wrong-tanh"

    return WrongTanhPass()
