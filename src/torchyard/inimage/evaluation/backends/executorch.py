"""ExecuTorch: a program lowered to a .pte, written to disk and run by ExecuTorch's C++ runtime on the CPU
whatever the entry's device. Each delegate is a backend of its own; what sets one apart is data."""

from __future__ import annotations

import importlib
import importlib.util
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch.utils import _pytree as pytree

from torchyard.inimage.cases import Call
from torchyard.inimage.evaluation.backends.protocol import Artifact, BackendRun, Job, Localizes
from torchyard.inimage.evaluation.backends.running import export_program, lowering_key, run_all, timed
from torchyard.inimage.evaluation.cache.xnnpack_patterns import prime, store_for
from torchyard.inimage.evaluation.errors import stage
from torchyard.inimage.evaluation.trees import to_device
from torchyard.inimage.start.probe import CPU
from torchyard.names import TORCH_DEVICES, BackendName


def _prime_xnnpack() -> None:
    """XNNPACK's pattern graphs from the entry's cache, not made again by every process."""
    prime(store_for(os.environ))


@dataclass(frozen=True)
class Delegate:
    """What one ExecuTorch backend hands its program to."""

    backend: BackendName
    # The partitioner's module and class (imported only to lower); None: every op on the portable kernels.
    partitioner: tuple[str, str] | None
    devices: frozenset[str]  # the entries' torch device types it serves
    unserved: str = ""  # why it serves no other (the reason reads "<unserved>; this entry targets <device>")
    prepare: Callable[[], None] | None = None  # after its partitioner is imported, before it is made

    def options(self) -> dict[str, Any]:
        """What the lowering's cache key holds of the delegate."""
        return {"partitioners": [self.partitioner[1]] if self.partitioner else []}

    def partitioners(self) -> list[Any]:
        """What `to_edge_transform_and_lower` takes to hand the program to it (imported only to lower)."""
        if self.partitioner is None:
            return []
        where, name = self.partitioner
        partitioner = getattr(importlib.import_module(where), name)
        if self.prepare is not None:
            self.prepare()
        return [partitioner()]


PORTABLE = Delegate("executorch-portable", None, frozenset(TORCH_DEVICES.values()))
XNNPACK = Delegate(
    "executorch-xnnpack",
    ("executorch.backends.xnnpack.partition.xnnpack_partitioner", "XnnpackPartitioner"),
    frozenset({"cpu"}),
    unserved="XNNPACK is a CPU backend",
    prepare=_prime_xnnpack,
)


def delegation(program: Any) -> dict[str, Any] | None:
    """What the delegate took of the lowered program, by ExecuTorch's own accounting (`get_delegation_info`):
    its subgraphs, the nodes it took and left, and the operators left to portable kernels (`getitem`, which
    unpacks a delegate's outputs, is no operator left out). None where that accounting fails: torchyard's
    note, never the lowering's failure."""
    try:
        from executorch.devtools.backend_debug import get_delegation_info

        info = get_delegation_info(program.exported_program().graph_module)
        left = sorted(
            name for name, counts in info.delegation_by_operator.items() if counts.non_delegated and name != "getitem"
        )
        return {
            "subgraphs": int(info.num_delegated_subgraphs),
            "delegated-nodes": int(info.num_delegated_nodes),
            "non-delegated-nodes": int(info.num_non_delegated_nodes),
            "left-out": left,
            "left-to": "portable kernels",
        }
    except Exception:  # an accounting the delegate's verdict does not depend on
        return None


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
    whole of `executorch.exir` (for a warning class), and dynamo with it: a large part of a warm run, where
    every program comes from the cache and nothing is lowered. The extension is what the wrapper
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


@dataclass(frozen=True)
class ExecuTorch:
    """The ExecuTorch backend of one delegate."""

    delegate: Delegate
    ARTIFACT = Artifact(".pte")
    EXPORTS = True
    LOCALIZES: Localizes = "lowered nodes"  # its runtime's taps give each node's value (`localize.executorch`)

    @property
    def NAME(self) -> BackendName:
        return self.delegate.backend

    @property
    def FIRST_USE(self) -> tuple[str, ...]:
        runtime = (
            "torch._dynamo",
            "torch.export._trace",
            "executorch.exir",
            "executorch.extension.pybindings.portable_lib",
        )
        return (*runtime, self.delegate.partitioner[0]) if self.delegate.partitioner else runtime

    def unavailable(self, device: torch.device) -> str | None:
        if importlib.util.find_spec("executorch") is None:
            return "executorch is not installed in this image"
        if device.type not in self.delegate.devices:
            return f"{self.delegate.unserved}; this entry targets {device.type}"
        return None

    def run(self, job: Job) -> BackendRun:
        case, delegate = job.case, self.delegate
        artifact = job.workdir / f"{case.name}-{delegate.backend.removeprefix('executorch-')}{self.ARTIFACT.suffix}"
        cpu_calls = [to_device(call, CPU) for call in job.calls]
        module = job.module.cpu()
        lowered: list[tuple[dict[str, Any], dict[str, str]]] = []

        def lower(path: Path) -> dict[str, Any]:
            # The compiler is imported only to lower: a run whose programs all come from the cache never pays
            # for it (dynamo included).
            from executorch.exir import to_edge_transform_and_lower

            exported = export_program(case, module, cpu_calls[0])
            # A failure past the export is ExecuTorch's (its passes, its partitioner, its emitter), named at
            # its own frame: `convert_constant_dim_order_pass` calling `.contiguous()` on a sparse constant.
            with stage("ExecuTorch's to_edge_transform_and_lower", "executorch"):
                program = to_edge_transform_and_lower(exported, partitioner=delegate.partitioners())
            delegated = delegation(program) if delegate.partitioner else None  # before memory planning adds nodes
            with stage("ExecuTorch's to_executorch", "executorch"):
                path.write_bytes(program.to_executorch().buffer)
            return {"keyword-order": keyword_order(exported, cpu_calls[0]), "delegation": delegated}

        def build() -> Callable[[list[Any]], Any]:
            key = lowering_key(case, delegate.backend, module, cpu_calls[0], CPU, options=delegate.options())
            known = case.known_failure(delegate.backend)
            meta, done = job.cache.materialize(key.digest, self.ARTIFACT.suffix, artifact, lower, known=known)
            lowered.append((meta, key.notes(done)))
            # The runtime reads the file back: the .pte on disk is what is tested, not an in-memory copy.
            return load_pte(artifact)

        forward, compile_seconds = timed(build, CPU)
        meta, state = lowered[0]
        order = meta["keyword-order"]

        def invoke(call: Call) -> object:
            return forward(flat_inputs(order, call))

        outputs, seconds, latency = run_all(invoke, cpu_calls, CPU)
        notes = {"pte_bytes": artifact.stat().st_size, "delegation": meta.get("delegation"), **state}
        return BackendRun(outputs, compile_seconds, seconds, artifact, notes, latency_ms=latency)
