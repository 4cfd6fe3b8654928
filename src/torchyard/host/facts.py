"""What the host offers containers: group ids, device nodes, Docker runtimes, CDI devices."""

from __future__ import annotations

import grp
import platform
from pathlib import Path

import docker

from torchyard.accelerators.protocol import HostFacts

DEVICE_NODES = ("/dev/kfd", "/dev/dri")
CDI_FOLDERS = ("/etc/cdi", "/var/run/cdi")
GROUPS = ("video", "render")


def _cdi_devices(folders: tuple[str, ...]) -> frozenset[str]:
    """`nvidia.com/gpu=all` when an NVIDIA CDI spec is installed (nvidia-ctk cdi generate writes one)."""
    for folder in folders:
        for spec in sorted(Path(folder).glob("*.y*ml")) + sorted(Path(folder).glob("*.json")):
            text = spec.read_text(errors="replace")
            if "nvidia.com/gpu" in text:
                return frozenset({"nvidia.com/gpu=all"})
    return frozenset()


def gather_host_facts(client: docker.DockerClient | None) -> HostFacts:
    group_ids = {}
    for name in GROUPS:
        try:
            group_ids[name] = grp.getgrnam(name).gr_gid
        except KeyError:
            continue
    runtimes = frozenset(client.info().get("Runtimes", {})) if client is not None else frozenset()
    return HostFacts(
        group_ids=group_ids,
        device_nodes=frozenset(node for node in DEVICE_NODES if Path(node).exists()),
        docker_runtimes=runtimes,
        cdi_devices=_cdi_devices(CDI_FOLDERS),
        system=platform.system(),
        machine=platform.machine(),
    )
