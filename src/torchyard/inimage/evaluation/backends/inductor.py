"""torch.compile with inductor, in one of torch.compile's modes (`inductor:<mode>`): graph breaks allowed, as
torch.compile allows them, and counted with recompilations by dynamo's own accounting; one graph where the case
says `fullgraph`."""

from __future__ import annotations

from typing import Any, Literal

import torch

from torchyard.inimage.evaluation.backends.compiled import compile_counted
from torchyard.inimage.evaluation.backends.protocol import Artifact, BackendRun, Job, Localizes
from torchyard.inimage.evaluation.backends.running import called, run_all, timed

NAME: Literal["inductor"] = "inductor"
ARTIFACT: Artifact | None = None  # inductor's own caches keep its kernels
EXPORTS = False
# The CPU's vector instructions, probed once per process and cached: torch 2.11 probes by compiling and
# running ten programs (tens of seconds), which each child a sweep forks would pay again.
FIRST_USE = ("torch._dynamo", "torch._inductor.compile_fx", "torch._inductor.cpu_vec_isa:pick_vec_isa")
LOCALIZES: Localizes = "compiler steps"


def unavailable(device: torch.device) -> str | None:
    return None


def run(job: Job, mode: str = "default") -> BackendRun:
    """In one of torch.compile's modes, from a compiler state of its own; every call must run compiled code
    (`compiled.NotCompiled` otherwise)."""
    before = graph_counts()
    compiled, tally = compile_counted(
        job.module, mode=mode, dynamic=job.case.dynamic_shapes is not None, fullgraph=job.case.fullgraph
    )
    with torch.no_grad():
        checked = tally.checked(called(compiled))
        _, compile_seconds = timed(lambda: checked(job.calls[0]), job.device)
        outputs, seconds, latency = run_all(checked, job.calls, job.device)
    return BackendRun(outputs, compile_seconds, seconds, latency_ms=latency, notes=graphs_since(before))


Counts = tuple[dict[str, int], int, tuple[Any, ...]]  # the last: dynamo's CompilationMetrics records


def graph_counts() -> Counts:
    """Dynamo's graph breaks by reason, the graphs it has made, and its records of the compiles it keeps (held,
    so each stays itself: `torch._dynamo.reset()` numbers frames from 0 again, and a new compile can carry an
    old one's id), so far in this process."""
    from torch._dynamo.utils import counters, get_compilation_metrics

    return dict(counters["graph_break"]), int(counters["stats"]["unique_graphs"]), tuple(get_compilation_metrics())


def graphs_since(before: Counts) -> dict[str, object]:
    """What the compile since `before` made: its graphs, its graph breaks and their reasons, first line each
    (dynamo counts a reason once per process: a worker that compiled the same code before adds none), and its
    recompilations with the guard that failed, from dynamo's compilation metrics (the last 64 compiles)."""
    breaks, graphs, compiles = graph_counts()
    reasons = {reason: count - before[0].get(reason, 0) for reason, count in breaks.items()}
    named = sorted(reason.strip().splitlines()[0] for reason, count in reasons.items() if count > 0)
    new = [metrics for metrics in compiles if not any(metrics is old for old in before[2])]
    guards = [str(metrics.recompile_reason) for metrics in new if getattr(metrics, "recompile_reason", None)]
    return {
        "graphs": graphs - before[1],
        "graph_breaks": sum(c for c in reasons.values() if c > 0),
        "graph_break_reasons": named,
        "recompiles": len(guards),
        "recompile_reasons": sorted({guard.strip().splitlines()[0] for guard in guards}),
    }
