"""Eager PyTorch on the entry's device: the baseline every suite shares."""

from __future__ import annotations

from typing import Literal

import torch

from torchyard.inimage.evaluation.backends.protocol import Artifact, BackendRun, Job, Localizes
from torchyard.inimage.evaluation.backends.running import called, run_all

NAME: Literal["eager"] = "eager"
ARTIFACT: Artifact | None = None
EXPORTS = False
FIRST_USE: tuple[str, ...] = ()
LOCALIZES: Localizes | None = None


def unavailable(device: torch.device) -> str | None:
    return None


def run(job: Job) -> BackendRun:
    with torch.no_grad():
        outputs, seconds, latency = run_all(called(job.module), job.calls, job.device)
    return BackendRun(outputs, 0.0, seconds, latency_ms=latency)
