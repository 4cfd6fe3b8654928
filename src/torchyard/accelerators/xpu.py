"""Intel XPU: the render node of each GPU the job was given and the render group by host id; the image carries
Level Zero (its loader, Intel's GPU driver library and the headers Triton's XPU backend compiles against).

The job's GPUs are the host's selection (ZE_AFFINITY_MASK, then ONEAPI_DEVICE_SELECTOR's `level_zero:` indexes
over what the mask leaves), resolved to render nodes through sysfs (Intel's render nodes in PCI order, as Level
Zero enumerates them): the container opens only those, numbered from 0, so the variables are not copied in; a
mask that names sub-devices (`0.1`) is passed renumbered. A selection that names no GPU here gives no render
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

NAME: Literal["xpu"] = "xpu"
NATIVE = NAME in NATIVE_ACCELERATORS
IMAGE_CHECKS = (*COMMON_IMAGE_CHECKS, "torch-xpu", "level-zero-loader", "level-zero-driver", "level-zero-headers")
MASK = str(DEVICE_FACTS["xpu"].visible)
SELECTOR = "ONEAPI_DEVICE_SELECTOR"
VISIBLE_DEVICE_VARIABLES: tuple[str, ...] = (MASK, SELECTOR)
SELECT_ALL = frozenset({"*", "gpu"})
PCI_VENDOR = "0x8086"
DRM = Path("class/drm")


def intel_render_minors(sysfs: Path) -> list[int]:
    """The minors of Intel's render nodes (`class/drm/renderD<N>` whose device is vendor 0x8086), in the PCI
    order of their devices."""
    drm = sysfs / DRM
    found = []
    for node in drm.glob("renderD*") if drm.is_dir() else ():
        try:
            vendor = (node / "device" / "vendor").read_text().strip().lower()
        except OSError:
            continue
        minor = node.name.removeprefix("renderD")
        if vendor == PCI_VENDOR and minor.isdigit():
            found.append(((node / "device").resolve().name, int(minor)))
    return [minor for _, minor in sorted(found)]


def selection(host: HostFacts, env: Mapping[str, str]) -> tuple[list[int], str | None]:
    """The render node minors of the job's GPUs, and the mask the container gets (renumbered) where the host's
    names sub-devices; raises `UnresolvedSelection` for a selection this host cannot resolve."""
    minors = [str(minor) for minor in intel_render_minors(host.sysfs)]
    mask = None
    if MASK in env:
        parts = [part.strip().partition(".") for part in env[MASK].split(",")]
        devices = pick(minors, MASK, ",".join(device for device, _, _ in parts))
        if any(dot for _, dot, _ in parts):  # device.sub-device: the device renumbered as the container sees it
            mask = ",".join(f"{devices.index(minors[int(device)])}{dot}{sub}" for device, dot, sub in parts)
        minors = devices
    if SELECTOR in env:
        backend, _, chosen = env[SELECTOR].strip().partition(":")
        if backend not in {"level_zero", "*"} or not chosen:
            raise UnresolvedSelection(f"{SELECTOR}={env[SELECTOR]!r}: torchyard resolves level_zero:<indexes> only")
        if chosen not in SELECT_ALL:
            if mask is not None:
                raise UnresolvedSelection(f"{SELECTOR} with a sub-device {MASK}: name the devices in one of them")
            minors = pick(minors, SELECTOR, chosen)
    return [int(minor) for minor in minors], mask


def docker_run_args(host: HostFacts, env: Mapping[str, str]) -> tuple[str, ...]:
    try:
        minors, mask = selection(host, env)
    except UnresolvedSelection:
        minors, mask = [], None  # host_problems says why; never every GPU
    return (
        *render_node_args(minors),
        *group_add_args(host, ("render",)),
        "--shm-size", "16g",  # PyTorch's workers share tensors through /dev/shm: its own, never the host's
        *(("--env", f"{MASK}={mask}") if mask is not None else ()),
        *NO_NVIDIA_DEVICES,
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
    try:
        if not selection(host, env)[0] and not problems:
            problems.append(f"sysfs ({host.sysfs / DRM}) shows no Intel render node")
    except UnresolvedSelection as error:
        problems.append(str(error))
    return tuple(problems)
