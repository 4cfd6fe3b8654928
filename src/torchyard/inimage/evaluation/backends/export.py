"""torch.export, saved to a .pt2 and loaded back (saving is where no-input programs used to break)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import torch

from torchyard.inimage.evaluation.backends.protocol import Artifact, BackendRun, Job, Localizes
from torchyard.inimage.evaluation.backends.running import called, export_program, lowering_key, run_all, timed
from torchyard.inimage.evaluation.errors import stage

NAME: Literal["export"] = "export"
ARTIFACT = Artifact(".pt2")
EXPORTS = True
# torch.export loads dynamo and AOTAutograd on its first call.
FIRST_USE = ("torch._dynamo", "torch.export._trace", "torch._functorch.aot_autograd")
LOCALIZES: Localizes = "nodes"


def unavailable(device: torch.device) -> str | None:
    return None


def run(job: Job) -> BackendRun:
    """The .pt2 comes from the artifact cache when nothing that decides it changed."""
    case, module, calls, device = job.case, job.module, job.calls, job.device
    artifact = job.workdir / f"{case.name}{ARTIFACT.suffix}"
    state: list[dict[str, str]] = []

    def save(path: Path) -> dict[str, Any]:
        program = export_program(case, module, calls[0])
        with stage("torch.export.save", "torch"):
            torch.export.save(program, path)
        return {}

    def build() -> torch.nn.Module:
        key = lowering_key(case, NAME, module, calls[0], device, options={})
        _, done = job.cache.materialize(key.digest, ARTIFACT.suffix, artifact, save, known=case.known_failure(NAME))
        state.append(key.notes(done))
        return torch.export.load(artifact).module()

    program, compile_seconds = timed(build, device)
    with torch.no_grad():
        outputs, seconds, latency = run_all(called(program), calls, device)
    return BackendRun(outputs, compile_seconds, seconds, artifact, state[0], latency_ms=latency)
