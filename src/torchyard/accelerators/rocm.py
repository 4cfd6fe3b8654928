"""AMD ROCm: the KFD and DRI device nodes, the video and render groups by host id, relaxed seccomp."""

from __future__ import annotations

from typing import Literal

from torchyard.accelerators.protocol import HostFacts, group_add_args
from torchyard.names import NATIVE_ACCELERATORS

NAME: Literal["rocm"] = "rocm"
NATIVE = NAME in NATIVE_ACCELERATORS
VISIBLE_DEVICE_VARIABLES: tuple[str, ...] = (
    "HIP_VISIBLE_DEVICES",
    "ROCR_VISIBLE_DEVICES",
    "CUDA_VISIBLE_DEVICES",
)
GROUPS = ("video", "render")


def docker_run_args(host: HostFacts) -> tuple[str, ...]:
    return (
        "--device", "/dev/kfd",
        "--device", "/dev/dri",
        *group_add_args(host, GROUPS),
        "--security-opt", "seccomp=unconfined",
        "--ipc=host",
        "--shm-size", "16g",
    )  # fmt: skip


def host_problems(host: HostFacts) -> tuple[str, ...]:
    problems = []
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
