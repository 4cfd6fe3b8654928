"""Intel XPU: the DRI render nodes and the render group by host id; the image carries Level Zero (its
loader, Intel's GPU driver library and the headers Triton's XPU backend compiles against)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from torchyard.accelerators.protocol import (
    COMMON_IMAGE_CHECKS,
    HostFacts,
    group_add_args,
    vendor_problems,
    visible_device_args,
)
from torchyard.names import NATIVE_ACCELERATORS

NAME: Literal["xpu"] = "xpu"
NATIVE = NAME in NATIVE_ACCELERATORS
IMAGE_CHECKS = (*COMMON_IMAGE_CHECKS, "torch-xpu", "level-zero-loader", "level-zero-driver", "level-zero-headers")
VISIBLE_DEVICE_VARIABLES: tuple[str, ...] = ("ZE_AFFINITY_MASK", "ONEAPI_DEVICE_SELECTOR")
PCI_VENDOR = "0x8086"


def docker_run_args(host: HostFacts, env: Mapping[str, str]) -> tuple[str, ...]:
    return (
        "--device", "/dev/dri",
        *group_add_args(host, ("render",)),
        "--shm-size", "16g",  # PyTorch's workers share tensors through /dev/shm: its own, never the host's
        *visible_device_args(VISIBLE_DEVICE_VARIABLES, env),
    )  # fmt: skip


def host_problems(host: HostFacts, env: Mapping[str, str]) -> tuple[str, ...]:
    problems = list(vendor_problems(host, PCI_VENDOR))
    if "/dev/dri" not in host.device_nodes:
        problems.append(
            "no /dev/dri: install Intel's GPU driver (`sudo apt-get install intel-opencl-icd libze1`) "
            "and check `ls /dev/dri/renderD*`"
        )
    if "render" not in host.group_ids:
        problems.append("no 'render' group on the host: `sudo groupadd --system render`")
    return tuple(problems)
