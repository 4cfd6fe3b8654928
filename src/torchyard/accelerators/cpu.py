"""CPU: no device flags, nothing to probe on the host."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from torchyard.accelerators.protocol import COMMON_IMAGE_CHECKS, NO_NVIDIA_DEVICES, HostFacts
from torchyard.names import NATIVE_ACCELERATORS

NAME: Literal["cpu"] = "cpu"
NATIVE = NAME in NATIVE_ACCELERATORS
IMAGE_CHECKS = COMMON_IMAGE_CHECKS


def docker_run_args(host: HostFacts, env: Mapping[str, str]) -> tuple[str, ...]:
    return NO_NVIDIA_DEVICES


def host_problems(host: HostFacts, env: Mapping[str, str]) -> tuple[str, ...]:
    return ()
