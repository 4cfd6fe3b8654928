"""One module per backend, listed in one explicit dict: how each runs, where it cannot, and the file it keeps."""

from __future__ import annotations

from pathlib import Path

import torch

from torchyard.inimage.cases import Call, Case, base_backend
from torchyard.inimage.evaluation.backends import aotinductor, eager, executorch, export, inductor, tensorrt
from torchyard.inimage.evaluation.backends.protocol import (
    NO_CACHE,
    Artifact,
    Backend,
    BackendRun,
    Chosen,
    Job,
    Runner,
)
from torchyard.inimage.evaluation.cache.artifacts import ArtifactCache
from torchyard.names import BackendName

BACKENDS: dict[BackendName, Backend] = {
    "eager": eager,
    "export": export,
    "inductor": inductor,
    "aotinductor": aotinductor,
    "executorch-portable": executorch.ExecuTorch(executorch.PORTABLE),
    "executorch-xnnpack": executorch.ExecuTorch(executorch.XNNPACK),
    "tensorrt": tensorrt,
}


def backend_of(name: str) -> Backend | None:
    """The backend a parameter name runs (`inductor:<mode>` is inductor's); None for a name that is none of them
    (a train backend's)."""
    found: Backend | None = BACKENDS.get(base_backend(name))  # type: ignore[call-overload]
    return found


def choose(name: str, device: torch.device | None = None) -> Chosen:
    """`name` resolved (`Chosen`), once: what the evaluation of a result reads; with `device`, why it cannot run
    there too."""
    backend = backend_of(name)
    mode = name.partition(":")[2] if backend is inductor else ""
    unavailable = backend.unavailable(device) if backend is not None and device is not None else None
    return Chosen(name, backend, mode, unavailable)


def unavailable_reason(backend: str, device: torch.device) -> str | None:
    """Why `backend` cannot run here (None when it can, or when it is not one of `BACKENDS`)."""
    return choose(backend, device).unavailable


def runner_for(backend: str | Chosen, cache: ArtifactCache = NO_CACHE) -> Runner:
    """The runner of a backend (its name, or as `choose` resolved it); `inductor:<mode>` is inductor in that
    torch.compile mode. Backends that keep their programs in files take them from `cache` when nothing that
    decides them changed."""
    chosen = backend if isinstance(backend, Chosen) else choose(backend)

    def runner(
        case: Case, module: torch.nn.Module, calls: list[Call], device: torch.device, workdir: Path
    ) -> BackendRun:
        return chosen.run(Job(case, module, calls, device, workdir, cache))

    return runner


__all__ = [
    "BACKENDS",
    "NO_CACHE",
    "Artifact",
    "Backend",
    "BackendRun",
    "Chosen",
    "Job",
    "Runner",
    "backend_of",
    "choose",
    "runner_for",
    "unavailable_reason",
]
