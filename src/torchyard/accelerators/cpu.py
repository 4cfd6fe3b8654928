"""CPU: no device flags, nothing to probe on the host."""

from __future__ import annotations

from typing import Literal

from torchyard.accelerators.protocol import HostFacts
from torchyard.names import NATIVE_ACCELERATORS

NAME: Literal["cpu"] = "cpu"
NATIVE = NAME in NATIVE_ACCELERATORS
VISIBLE_DEVICE_VARIABLES: tuple[str, ...] = ()


def docker_run_args(host: HostFacts) -> tuple[str, ...]:
    return ()


def host_problems(host: HostFacts) -> tuple[str, ...]:
    return ()
