"""torch.compile with inductor, fullgraph, in one of torch.compile's modes (`inductor:<mode>`)."""

from __future__ import annotations

from typing import Literal

import torch

from torchyard.inimage.parity.backends.protocol import Artifact, BackendRun, Job, Localizes
from torchyard.inimage.parity.backends.running import called, run_all, timed

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
    """In one of torch.compile's modes."""
    compiled = torch.compile(
        job.module,
        backend="inductor",
        mode=None if mode == "default" else mode,
        dynamic=job.case.dynamic_shapes is not None,
        fullgraph=True,
    )
    with torch.no_grad():
        _, compile_seconds = timed(lambda: called(compiled)(job.calls[0]), job.device)
        outputs, seconds, latency = run_all(called(compiled), job.calls, job.device)
    return BackendRun(outputs, compile_seconds, seconds, latency_ms=latency)
