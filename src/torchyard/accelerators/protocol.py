"""What every accelerator module answers (`Accelerator`), and the host facts it answers from."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from torchyard.names import AcceleratorName

# An entry that asks for no NVIDIA GPU says so to NVIDIA's runtime, which a runner may have made the engine's
# default: it hands every GPU to a container whose environment names them, whatever image or flag set that.
NO_NVIDIA_DEVICES = ("--env", "NVIDIA_VISIBLE_DEVICES=void")

# PCI vendor ids (sysfs `vendor`) of the GPU makers torchyard targets, and the names doctor prints.
PCI_VENDORS = {"0x10de": "NVIDIA", "0x1002": "AMD", "0x8086": "Intel"}


@dataclass(frozen=True)
class HostFacts:
    """What torchyard learned about the host; gathered by `doctor`, passed in so tests can fake it."""

    group_ids: Mapping[str, int] = field(default_factory=dict)
    device_nodes: frozenset[str] = frozenset()
    docker_runtimes: frozenset[str] = frozenset()
    cdi_enabled: bool = False  # the engine accepts CDI devices (`docker info`: CDISpecDirs)
    cdi_devices: frozenset[str] = frozenset()  # CDI device names the engine's spec folders define
    nvidia_hook: bool = False  # nvidia-container-runtime-hook is installed: the engine serves `--gpus`
    # PCI vendor ids of the host's display and accelerator devices; None where sysfs could not be read.
    gpu_vendors: frozenset[str] | None = None
    memory_bytes: int = 0  # the engine's memory (`docker info`: MemTotal); 0 where unknown
    system: str = "Linux"  # platform.system()
    machine: str = "x86_64"  # platform.machine()
    sysfs: Path = Path("/sys")  # where the GPUs' render nodes are looked up (a test passes a fake tree)


class Accelerator(Protocol):
    @property
    def NAME(self) -> AcceleratorName: ...

    @property
    def NATIVE(self) -> bool:
        """Runs natively in a venv made from the entry's lock (no container reaches the device)."""
        ...

    @property
    def IMAGE_CHECKS(self) -> tuple[str, ...]:
        """What a built image must hold (names `torchyard.inimage.checks.image` knows), checked as its last step."""
        ...

    def docker_run_args(self, host: HostFacts, env: Mapping[str, str]) -> tuple[str, ...]:
        """Device flags for `docker run` (the job's GPU selection from `env` included), before the matrix's
        own `docker-run` extras."""
        ...

    def host_problems(self, host: HostFacts, env: Mapping[str, str]) -> tuple[str, ...]:
        """What the host lacks to run this accelerator's containers, each with the command that fixes it."""
        ...


# Every image: inductor compiles C++ (CPU kernels, Triton launchers) against Python's headers. (A missing
# torch is the probe's to report: the CPU needs no particular build of it.)
COMMON_IMAGE_CHECKS = ("gcc", "python-headers", "torch-companions")


def visible_device_args(variables: tuple[str, ...], env: Mapping[str, str]) -> tuple[str, ...]:
    """`-e NAME` for each visible-device variable set on the host (docker copies the host value)."""
    return tuple(arg for name in variables if name in env for arg in ("-e", name))


def group_add_args(host: HostFacts, groups: tuple[str, ...]) -> tuple[str, ...]:
    """`--group-add <gid>` by numeric id: group names inside the image need not match the host's."""
    return tuple(
        arg for group in groups if group in host.group_ids for arg in ("--group-add", str(host.group_ids[group]))
    )


def vendor_problems(host: HostFacts, vendor_id: str) -> tuple[str, ...]:
    """A problem when the host's PCI devices are known and none is this vendor's GPU."""
    if host.gpu_vendors is None or vendor_id in host.gpu_vendors:
        return ()
    found = ", ".join(sorted(PCI_VENDORS.get(vendor, vendor) for vendor in host.gpu_vendors)) or "none"
    return (
        f"no {PCI_VENDORS[vendor_id]} GPU on this host (PCI vendor {vendor_id}; display and accelerator devices "
        f"found: {found}): run the entry on a runner with one",
    )


class UnresolvedSelection(ValueError):
    """The job's GPU selection names no GPU this host's sysfs shows: its one line says which and what is here."""


def render_node_args(minors: Sequence[int]) -> tuple[str, ...]:
    """`--device /dev/dri/renderD<minor>` for each GPU the job was given: its render node only, never all of
    /dev/dri (another runner's GPUs on a shared box)."""
    return tuple(arg for minor in minors for arg in ("--device", f"/dev/dri/renderD{minor}"))


def pick(gpus: Sequence[str], variable: str, value: str, by_id: Mapping[str, str] | None = None) -> list[str]:
    """The items of `gpus` (in enumeration order) that `value` names by index, or by id where `by_id` maps an id
    to an item; a selection naming nothing here raises `UnresolvedSelection`."""
    chosen = []
    for part in (part.strip() for part in value.split(",")):
        if part.isdigit() and int(part) < len(gpus):
            chosen.append(gpus[int(part)])
        elif by_id is not None and part in by_id:
            chosen.append(by_id[part])
        else:
            raise UnresolvedSelection(
                f"{variable}={value!r}: {part!r} names no GPU of the {len(gpus)} this host shows (0-{len(gpus) - 1})"
                if gpus
                else f"{variable}={value!r}: this host shows no GPU of this kind in sysfs"
            )
    return list(dict.fromkeys(chosen))
