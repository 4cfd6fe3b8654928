"""What the host offers containers: group ids, device nodes, GPUs by PCI vendor, Docker runtimes, CDI."""

from __future__ import annotations

import grp
import platform
import re
import shutil
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import docker

from torchyard.accelerators.protocol import HostFacts

DEVICE_NODES = ("/dev/kfd", "/dev/dri")
CDI_FOLDERS = ("/etc/cdi", "/var/run/cdi")
GROUPS = ("video", "render")
PCI_DEVICES = Path("/sys/bus/pci/devices")
# PCI base classes of GPUs: 0x03 display controllers (NVIDIA and Intel GPUs), 0x12 processing
# accelerators (AMD Instinct).
GPU_CLASSES = ("0x03", "0x12")
NVIDIA_HOOK = "nvidia-container-runtime-hook"
CDI_KIND = re.compile(r"""^kind:\s*["']?([\w./-]+)["']?""", re.MULTILINE)
CDI_NAME = re.compile(r"""^\s*-?\s*name:\s*["']?([\w.:-]+)["']?""", re.MULTILINE)


def gpu_vendors(devices: Path = PCI_DEVICES) -> frozenset[str] | None:
    """PCI vendor ids of the display and accelerator devices; None when sysfs has no PCI bus to read."""
    if not devices.is_dir():
        return None
    vendors = set()
    for device in devices.iterdir():
        try:
            pci_class = (device / "class").read_text().strip()
            vendor = (device / "vendor").read_text().strip().lower()
        except OSError:
            continue
        if pci_class.startswith(GPU_CLASSES):
            vendors.add(vendor)
    return frozenset(vendors)


def cdi_devices(folders: Iterable[str]) -> frozenset[str]:
    """`kind=name` of every device the CDI specs in `folders` define (NVIDIA's: nvidia.com/gpu=0, =all)."""
    names: set[str] = set()
    for folder in folders:
        path = Path(folder)
        specs = sorted(path.glob("*.y*ml")) + sorted(path.glob("*.json")) if path.is_dir() else []
        for spec in specs:
            text = spec.read_text(errors="replace")
            kind = CDI_KIND.search(text) or re.search(r'"kind"\s*:\s*"([\w./-]+)"', text)
            if kind is None:
                continue
            found = CDI_NAME.findall(text) or re.findall(r'"name"\s*:\s*"([\w.:-]+)"', text)
            names.update(f"{kind[1]}={name}" for name in found)
    return frozenset(names)


def engine_cdi(info: Mapping[str, Any]) -> tuple[bool, frozenset[str]]:
    """Whether the engine accepts CDI devices, and which: its own discovered devices where it lists them
    (Docker 28.3+), else the specs in the folders it reads. An engine without CDISpecDirs has CDI off."""
    folders = tuple(info.get("CDISpecDirs") or ())
    if not folders:
        return False, cdi_devices(CDI_FOLDERS)  # installed, but the engine will not use them
    discovered = [
        device.get("ID", "") for device in info.get("DiscoveredDevices") or () if device.get("Source") == "cdi"
    ]
    return True, frozenset(filter(None, discovered)) or cdi_devices(folders)


def gather_host_facts(client: docker.DockerClient | None) -> HostFacts:
    group_ids = {}
    for name in GROUPS:
        try:
            group_ids[name] = grp.getgrnam(name).gr_gid
        except KeyError:
            continue
    info: Mapping[str, Any] = client.info() if client is not None else {}
    enabled, devices = engine_cdi(info)
    return HostFacts(
        group_ids=group_ids,
        device_nodes=frozenset(node for node in DEVICE_NODES if Path(node).exists()),
        docker_runtimes=frozenset(info.get("Runtimes") or {}),
        cdi_enabled=enabled,
        cdi_devices=devices,
        nvidia_hook=shutil.which(NVIDIA_HOOK) is not None,
        gpu_vendors=gpu_vendors(),
        memory_bytes=int(info.get("MemTotal") or 0),
        system=platform.system(),
        machine=platform.machine(),
    )
