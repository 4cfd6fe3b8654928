"""What every accelerator module answers (`Accelerator`), and the host facts it answers from."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from torchyard.names import AcceleratorName


@dataclass(frozen=True)
class HostFacts:
    """What torchyard learned about the host; gathered by `doctor`, passed in so tests can fake it."""

    group_ids: Mapping[str, int] = field(default_factory=dict)
    device_nodes: frozenset[str] = frozenset()
    docker_runtimes: frozenset[str] = frozenset()
    cdi_devices: frozenset[str] = frozenset()
    system: str = "Linux"  # platform.system()
    machine: str = "x86_64"  # platform.machine()


class Accelerator(Protocol):
    @property
    def NAME(self) -> AcceleratorName: ...

    @property
    def NATIVE(self) -> bool:
        """Runs natively in a venv made from the entry's lock (no container reaches the device)."""
        ...

    @property
    def VISIBLE_DEVICE_VARIABLES(self) -> tuple[str, ...]: ...

    def docker_run_args(self, host: HostFacts) -> tuple[str, ...]:
        """Device flags for `docker run`, before the matrix's own `docker-run` extras."""
        ...

    def host_problems(self, host: HostFacts) -> tuple[str, ...]:
        """What the host lacks to run this accelerator's containers, each with the command that fixes it."""
        ...


def visible_device_args(variables: tuple[str, ...], env: Mapping[str, str]) -> tuple[str, ...]:
    """`-e NAME` for each visible-device variable set on the host (docker copies the host value)."""
    return tuple(arg for name in variables if name in env for arg in ("-e", name))


def group_add_args(host: HostFacts, groups: tuple[str, ...]) -> tuple[str, ...]:
    """`--group-add <gid>` by numeric id: group names inside the image need not match the host's."""
    return tuple(
        arg for group in groups if group in host.group_ids for arg in ("--group-add", str(host.group_ids[group]))
    )
