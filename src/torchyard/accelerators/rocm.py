"""AMD ROCm: the KFD and DRI device nodes, the video and render groups by host id, and shared memory for
PyTorch's workers sized by --shm-size, not the host's IPC namespace: the container keeps docker's seccomp
profile and its own /dev/shm (a machine that needs more allows it in machine.toml, for trusted runs only).

Every GPU's node is passed, so the job's selection (HIP_VISIBLE_DEVICES and its aliases) keeps its host
numbering inside the container and is copied in as it is."""

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

NAME: Literal["rocm"] = "rocm"
NATIVE = NAME in NATIVE_ACCELERATORS
IMAGE_CHECKS = (*COMMON_IMAGE_CHECKS, "torch-hip", "rocm-runtime")
VISIBLE_DEVICE_VARIABLES: tuple[str, ...] = (
    "HIP_VISIBLE_DEVICES",
    "ROCR_VISIBLE_DEVICES",
    "CUDA_VISIBLE_DEVICES",
)
GROUPS = ("video", "render")
PCI_VENDOR = "0x1002"


def docker_run_args(host: HostFacts, env: Mapping[str, str]) -> tuple[str, ...]:
    return (
        "--device", "/dev/kfd",
        "--device", "/dev/dri",
        *group_add_args(host, GROUPS),
        "--shm-size", "16g",
        *visible_device_args(VISIBLE_DEVICE_VARIABLES, env),
    )  # fmt: skip


def host_problems(host: HostFacts, env: Mapping[str, str]) -> tuple[str, ...]:
    problems = list(vendor_problems(host, PCI_VENDOR))
    if "/dev/kfd" not in host.device_nodes:
        problems.append(
            "no /dev/kfd: install the amdgpu kernel driver (`sudo amdgpu-install --usecase=dkms`) and reboot"
        )
    if "/dev/dri" not in host.device_nodes:
        problems.append("no /dev/dri: the GPU's DRM driver is not loaded (`sudo modprobe amdgpu`)")
    problems.extend(
        f"no {group!r} group on the host: `sudo groupadd --system {group}` (the driver's udev rules use it)"
        for group in GROUPS
        if group not in host.group_ids
    )
    return tuple(problems)
