"""What every backend answers (`Backend`), and what a run of one gives back (`BackendRun`). Its suite and the
distributions that version it are in `torchyard.names.BACKEND_FACTS`: the host reads them too."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

import torch

from torchyard.inimage.cases import Call, Case
from torchyard.inimage.evaluation.cache.artifacts import ArtifactCache
from torchyard.inimage.evaluation.trees import Leaf
from torchyard.names import BackendName

# How `evaluation.localize` says where a failing backend diverges: node by node through its exported program
# ("nodes"), node by node through its lowered program's own runtime ("lowered nodes"), or by bisecting its
# compiler's steps ("compiler steps").
Localizes = Literal["nodes", "lowered nodes", "compiler steps"]


@dataclass(frozen=True)
class Artifact:
    """The file a backend's program is kept in, in the artifact cache and the run's folder."""

    suffix: str  # the cache's suffix: ".pt2", ".pte", ".ep"
    # The program run is the one read back from the file, so the suites require the file on disk. False where
    # the compiled program runs from memory and the file is only kept for later runs (TensorRT's engines).
    loaded: bool = True


@dataclass
class BackendRun:
    outputs: list[list[Leaf]]
    compile_seconds: float
    run_seconds: float
    artifact: Path | None = None
    notes: dict[str, Any] = field(default_factory=dict)
    latency_ms: float | None = None  # median of REPEATS synchronized calls after WARMUP, first call's inputs


Runner = Callable[[Case, torch.nn.Module, list[Call], torch.device, Path], BackendRun]
NO_CACHE = ArtifactCache(None)


@dataclass(frozen=True)
class Job:
    """One case's module for one backend: the calls (on the device), the run's folder, the artifact cache."""

    case: Case
    module: torch.nn.Module
    calls: list[Call]
    device: torch.device
    workdir: Path
    cache: ArtifactCache = NO_CACHE


class Backend(Protocol):
    @property
    def NAME(self) -> BackendName: ...

    @property
    def ARTIFACT(self) -> Artifact | None:
        """The file its program is kept in; None where it keeps none (eager, inductor)."""
        ...

    @property
    def EXPORTS(self) -> bool:
        """Whether its program starts from torch.export's: where it fails, a call that does not export failed
        at the export."""
        ...

    @property
    def FIRST_USE(self) -> tuple[str, ...]:
        """What it imports the first time it runs, a module each, or `module:function` where a call is part of it
        (computed once per process, then cached): a sweep does these once, before it forks its children."""
        ...

    @property
    def LOCALIZES(self) -> Localizes | None:
        """How localization says where it diverges (`Localizes`); None where it cannot."""
        ...

    def unavailable(self, device: torch.device) -> str | None:
        """Why it cannot run for an entry on `device` (what the image lacks, or the wrong device); None if it can."""
        ...

    def run(self, job: Job) -> BackendRun:
        """Compile or lower the job's module (its artifact from the job's cache when nothing that decides it
        changed), run it on each call, and time it; the outputs as each call's flat list of leaves."""
        ...


@dataclass(frozen=True)
class Chosen:
    """A backend as a test names it (`inductor:<mode>` is inductor in that torch.compile mode), resolved once, on
    the run's device: its module (None for a name that is none of them, a training step's), why it cannot run
    there, and how it runs and is localized; the evaluation reads these and looks nothing up again."""

    name: str
    backend: Backend | None
    mode: str = ""
    unavailable: str | None = None

    @property
    def localizes(self) -> Localizes | None:
        return self.backend.LOCALIZES if self.backend is not None else None

    def run(self, job: Job) -> BackendRun:
        assert self.backend is not None, self.name
        # inductor's run takes its torch.compile mode; a backend of one program per name takes none.
        return self.backend.run(job, mode=self.mode) if self.mode else self.backend.run(job)  # type: ignore[call-arg]
