"""Apple MPS: no container reaches Apple's GPU, so MPS entries run natively, on macOS on Apple silicon, in
a venv made from their own lock."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from torchyard.accelerators.protocol import NO_NVIDIA_DEVICES, HostFacts
from torchyard.names import NATIVE_ACCELERATORS

NAME: Literal["mps"] = "mps"
NATIVE = NAME in NATIVE_ACCELERATORS
IMAGE_CHECKS: tuple[str, ...] = ()  # no image


def docker_run_args(host: HostFacts, env: Mapping[str, str]) -> tuple[str, ...]:
    return NO_NVIDIA_DEVICES


def host_problems(host: HostFacts, env: Mapping[str, str]) -> tuple[str, ...]:
    if host.system == "Darwin" and host.machine == "arm64":
        return ()
    return (
        f"no Apple GPU: MPS runs on macOS on Apple silicon, and this host is {host.system} {host.machine} "
        "(run the entry on a self-hosted macOS arm64 runner)",
    )
