"""NVIDIA CUDA: CDI device where the engine has NVIDIA's CDI spec, else the nvidia runtime's `--gpus all`."""

from __future__ import annotations

from typing import Literal

from torchyard.accelerators.protocol import HostFacts
from torchyard.names import NATIVE_ACCELERATORS

NAME: Literal["cuda"] = "cuda"
NATIVE = NAME in NATIVE_ACCELERATORS
VISIBLE_DEVICE_VARIABLES: tuple[str, ...] = ("CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES")
CDI_DEVICE = "nvidia.com/gpu=all"


def docker_run_args(host: HostFacts) -> tuple[str, ...]:
    # TF32 is pinned off here as well as in the probe: the override also reaches cuBLAS calls that
    # bypass torch's flags.
    if CDI_DEVICE in host.cdi_devices:
        return ("--device", CDI_DEVICE, "-e", "NVIDIA_TF32_OVERRIDE=0")
    return ("--gpus", "all", "-e", "NVIDIA_TF32_OVERRIDE=0")


def host_problems(host: HostFacts) -> tuple[str, ...]:
    if CDI_DEVICE in host.cdi_devices or "nvidia" in host.docker_runtimes:
        return ()
    return (
        "no NVIDIA container runtime or CDI spec: install nvidia-container-toolkit, then run "
        "`sudo nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml` (or "
        "`sudo nvidia-ctk runtime configure --runtime=docker && sudo systemctl restart docker`)",
    )
