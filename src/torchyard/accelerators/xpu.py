"""Intel XPU: the DRI render nodes and the render group by host id."""

from __future__ import annotations

from typing import Literal

from torchyard.accelerators.protocol import HostFacts, group_add_args
from torchyard.names import NATIVE_ACCELERATORS

NAME: Literal["xpu"] = "xpu"
NATIVE = NAME in NATIVE_ACCELERATORS
VISIBLE_DEVICE_VARIABLES: tuple[str, ...] = ("ZE_AFFINITY_MASK", "ONEAPI_DEVICE_SELECTOR")


def docker_run_args(host: HostFacts) -> tuple[str, ...]:
    return ("--device", "/dev/dri", *group_add_args(host, ("render",)), "--ipc=host")


def host_problems(host: HostFacts) -> tuple[str, ...]:
    problems = []
    if "/dev/dri" not in host.device_nodes:
        problems.append(
            "no /dev/dri: install Intel's GPU driver (`sudo apt-get install intel-opencl-icd libze1`) "
            "and check `ls /dev/dri/renderD*`"
        )
    if "render" not in host.group_ids:
        problems.append("no 'render' group on the host: `sudo groupadd --system render`")
    return tuple(problems)
