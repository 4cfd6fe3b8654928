"""AOTInductor: the exported program compiled ahead of time into a `.pt2` package (a shared library and its
weights), loaded back by torch's package loader and run, as a C++ deployment would run it."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import torch

from torchyard.inimage.evaluation.backends.protocol import Artifact, BackendRun, Job, Localizes
from torchyard.inimage.evaluation.backends.running import called, export_program, lowering_key, run_all, timed

NAME: Literal["aotinductor"] = "aotinductor"
# Not export's `.pt2`: both packages of a case sit side by side in the cache and in the run's folder.
ARTIFACT = Artifact(".aoti.pt2")
EXPORTS = True
FIRST_USE = (
    "torch._dynamo",
    "torch.export._trace",
    "torch._inductor.compile_fx",
    "torch._inductor.cpu_vec_isa:pick_vec_isa",  # see inductor's
)
LOCALIZES: Localizes | None = None
# The device types AOTInductor generates code for (ROCm's torch calls its devices cuda).
DEVICES = frozenset({"cpu", "cuda"})


def unavailable(device: torch.device) -> str | None:
    if device.type not in DEVICES:
        return f"AOTInductor compiles for CPU and CUDA devices; this entry targets {device.type}"
    return None


def run(job: Job) -> BackendRun:
    """The package comes from the artifact cache when nothing that decides it changed; either way the program
    run is the one loaded from the file. Loading it loads its shared library, so a package is read back only
    from the entry's cache scope, which no less trusted run writes (docs/concepts/trust.md).

    The loaded program takes the call as the exported program does (keyword inputs reordered by its input
    spec, leaves that are not tensors left out, as export made them constants) and gives back the exported
    program's output tree: its leaves are compared as export's are."""
    case, module, calls, device = job.case, job.module, job.calls, job.device
    artifact = job.workdir / f"{case.name}{ARTIFACT.suffix}"
    state: list[dict[str, str]] = []

    def package(path: Path) -> dict[str, Any]:
        # A str: torch checks that the path it returns is the one it was given, and returns a str.
        torch._inductor.aoti_compile_and_package(export_program(case, module, calls[0]), package_path=str(path))
        return {}

    def build() -> Any:
        key = lowering_key(case, NAME, module, calls[0], device, options={})
        _, done = job.cache.materialize(key.digest, ARTIFACT.suffix, artifact, package, known=case.known_failure(NAME))
        state.append(key.notes(done))
        # -1: the current device, where the entry's device names no index.
        return torch._inductor.aoti_load_package(artifact, device_index=-1 if device.index is None else device.index)

    program, compile_seconds = timed(build, device)
    with torch.no_grad():
        outputs, seconds, latency = run_all(called(program), calls, device)
    notes = {"package_bytes": artifact.stat().st_size, **state[0]}
    return BackendRun(outputs, compile_seconds, seconds, artifact, notes, latency_ms=latency)
