"""AMD ROCm: /dev/kfd and the render node of each GPU the job was given, the video and render groups by host id,
and shared memory for PyTorch's workers sized by --shm-size, not the host's IPC namespace: the container keeps
docker's seccomp profile and its own /dev/shm (a machine that needs more allows it in machine.toml, for trusted
runs only).

The job's GPUs are the host's selection (ROCR_VISIBLE_DEVICES, then HIP_VISIBLE_DEVICES or its alias
CUDA_VISIBLE_DEVICES over what that leaves, by index or GPU-<uuid>), resolved to render nodes through KFD's
topology in sysfs, as AMD's docs restrict a container (`--device /dev/kfd --device /dev/dri/renderD<N>`): the
container opens only those GPUs, numbered from 0, so the variables are not copied in (a pull request's test
could reset them; the devices it lacks it cannot open). A selection that names no GPU here gives no render
node and one line in `host_problems`, never every GPU."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Literal

from torchyard.accelerators.protocol import (
    COMMON_IMAGE_CHECKS,
    NO_NVIDIA_DEVICES,
    HostFacts,
    UnresolvedSelection,
    group_add_args,
    pick,
    render_node_args,
    vendor_problems,
)
from torchyard.names import DEVICE_FACTS, NATIVE_ACCELERATORS

NAME: Literal["rocm"] = "rocm"
NATIVE = NAME in NATIVE_ACCELERATORS
IMAGE_CHECKS = (*COMMON_IMAGE_CHECKS, "torch-hip", "rocm-runtime")
# ROCr's own selection first; HIP's (CUDA_VISIBLE_DEVICES is its alias) indexes what ROCr left.
ROCR_VARIABLE = "ROCR_VISIBLE_DEVICES"
HIP_VARIABLES: tuple[str, ...] = (str(DEVICE_FACTS["rocm"].visible), *DEVICE_FACTS["rocm"].aliases)
VISIBLE_DEVICE_VARIABLES: tuple[str, ...] = (HIP_VARIABLES[0], ROCR_VARIABLE, HIP_VARIABLES[1])
GROUPS = ("video", "render")
PCI_VENDOR = "0x1002"
KFD_NODES = Path("class/kfd/kfd/topology/nodes")


def kfd_gpus(sysfs: Path) -> list[tuple[str, int]]:
    """(GPU-<uuid>, render node minor) of each GPU in KFD's order (its topology's nodes by number; a CPU node
    has gpu_id 0), as ROCr enumerates them."""
    nodes = sysfs / KFD_NODES
    if not nodes.is_dir():
        return []
    gpus = []
    for node in sorted((node for node in nodes.iterdir() if node.name.isdigit()), key=lambda node: int(node.name)):
        try:
            gpu_id = (node / "gpu_id").read_text().strip()
            lines = (node / "properties").read_text().splitlines()
        except OSError:
            continue
        properties = dict(line.split(maxsplit=1) for line in lines if len(line.split()) == 2)
        if gpu_id in {"", "0"} or not properties.get("drm_render_minor", "").isdigit():
            continue
        unique = int(properties.get("unique_id", "0") or "0")
        gpus.append((f"GPU-{unique:016x}", int(properties["drm_render_minor"])))
    return gpus


def selected_minors(host: HostFacts, env: Mapping[str, str]) -> list[int]:
    """The render node minors of the job's GPUs; raises `UnresolvedSelection` for one this host lacks."""
    gpus = kfd_gpus(host.sysfs)
    minors = [str(minor) for _, minor in gpus]
    by_id = {uuid: str(minor) for uuid, minor in gpus}
    if ROCR_VARIABLE in env:
        minors = pick(minors, ROCR_VARIABLE, env[ROCR_VARIABLE], by_id)
    hip = next((variable for variable in HIP_VARIABLES if variable in env), None)
    if hip is not None:
        minors = pick(minors, hip, env[hip], {uuid: minor for uuid, minor in by_id.items() if minor in minors})
    return [int(minor) for minor in minors]


def docker_run_args(host: HostFacts, env: Mapping[str, str]) -> tuple[str, ...]:
    try:
        minors = selected_minors(host, env)
    except UnresolvedSelection:
        minors = []  # host_problems says why; never every GPU
    return (
        "--device", "/dev/kfd",
        *render_node_args(minors),
        *group_add_args(host, GROUPS),
        "--shm-size", "16g",
        *NO_NVIDIA_DEVICES,
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
    try:
        if not selected_minors(host, env) and not problems:
            problems.append(f"KFD's topology ({host.sysfs / KFD_NODES}) shows no GPU with a render node")
    except UnresolvedSelection as error:
        problems.append(str(error))
    return tuple(problems)
