"""NVIDIA CUDA: a CDI device where the engine has CDI on and NVIDIA's spec, else the `--gpus` request
that nvidia-container-toolkit's hook serves; the job's GPU selection becomes that device request.

The host's CUDA_VISIBLE_DEVICES is never copied in: it numbers the host's GPUs, and the container sees
only the selected ones, numbered from 0. NVIDIA_VISIBLE_DEVICES is not copied either: NVIDIA's CDI spec
sets it to `void`, and with `--gpus` the request decides."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Literal

from torchyard.accelerators.protocol import COMMON_IMAGE_CHECKS, HostFacts, vendor_problems
from torchyard.names import DEVICE_FACTS, NATIVE_ACCELERATORS

NAME: Literal["cuda"] = "cuda"
NATIVE = NAME in NATIVE_ACCELERATORS
IMAGE_CHECKS = (*COMMON_IMAGE_CHECKS, "torch-cuda", "triton-ptxas")
CDI_KIND = "nvidia.com/gpu"
PCI_VENDOR = "0x10de"
# Where a runner names the job's GPUs, most specific first: the toolkit's own variable, then CUDA's.
SELECTION_VARIABLES = ("NVIDIA_VISIBLE_DEVICES", str(DEVICE_FACTS["cuda"].visible))
GPU_ID = re.compile(r"[0-9]+(:[0-9]+)?|(GPU|MIG)-[A-Za-z0-9/-]+")
# TF32 is pinned off here as well as in the probe: the override also reaches cuBLAS calls that bypass
# torch's flags. LeRobot's CUDA containers use a 16 GB /dev/shm (DataLoader workers share batches there).
RUNTIME_ARGS = (
    "-e", "NVIDIA_DRIVER_CAPABILITIES=compute,utility",
    "-e", "NVIDIA_TF32_OVERRIDE=0",
    "--shm-size", "16g",
)  # fmt: skip


def selected_gpus(env: Mapping[str, str]) -> tuple[str | None, tuple[str, ...]]:
    """(the variable that selects, the GPUs it names); (None, ()) means every GPU."""
    for variable in SELECTION_VARIABLES:
        value = env.get(variable)
        if value is None or value.strip() == "all":
            continue
        return variable, tuple(part.strip() for part in value.split(",") if part.strip())
    return None, ()


def uses_cdi(host: HostFacts) -> bool:
    return host.cdi_enabled and f"{CDI_KIND}=all" in host.cdi_devices


def device_request(host: HostFacts, env: Mapping[str, str]) -> tuple[str, ...]:
    """`--device nvidia.com/gpu=N` per selected GPU under CDI, else `--gpus "device=N,M"` (its quotes keep
    the comma inside the request) or `--gpus all`."""
    _, gpus = selected_gpus(env)
    if uses_cdi(host):
        return tuple(arg for gpu in gpus or ("all",) for arg in ("--device", f"{CDI_KIND}={gpu}"))
    return ("--gpus", f'"device={",".join(gpus)}"' if gpus else "all")


def docker_run_args(host: HostFacts, env: Mapping[str, str]) -> tuple[str, ...]:
    return (*device_request(host, env), *RUNTIME_ARGS)


def _selection_problems(env: Mapping[str, str]) -> tuple[str, ...]:
    variable, gpus = selected_gpus(env)
    if variable is None:
        return ()
    if not gpus or gpus in {("none",), ("void",)}:
        return (f"{variable}={env[variable]!r} gives this job no GPU (unset it, or name GPUs: 0,1 or GPU-<uuid>)",)
    bad = [gpu for gpu in gpus if not GPU_ID.fullmatch(gpu)]
    if bad:
        return (f"{variable}: {bad[0]!r} is not a GPU index, GPU-<uuid> or MIG-<uuid>",)
    return ()


def host_problems(host: HostFacts, env: Mapping[str, str]) -> tuple[str, ...]:
    problems = [*vendor_problems(host, PCI_VENDOR), *_selection_problems(env)]
    if uses_cdi(host) or host.nvidia_hook or "nvidia" in host.docker_runtimes:
        return tuple(problems)
    if f"{CDI_KIND}=all" in host.cdi_devices:
        problems.append(
            "NVIDIA's CDI spec is installed but the engine has CDI off (Docker before 28.2, or the `cdi` feature "
            'disabled) and no nvidia-container-runtime-hook serves --gpus: set `"features": {"cdi": true}` in '
            "/etc/docker/daemon.json and restart docker (Docker 25+), or install nvidia-container-toolkit"
        )
    else:
        problems.append(
            "no NVIDIA container runtime or CDI spec: install nvidia-container-toolkit, then run "
            "`sudo nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml` (or "
            "`sudo nvidia-ctk runtime configure --runtime=docker && sudo systemctl restart docker`)"
        )
    return tuple(problems)
