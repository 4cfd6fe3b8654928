"""The in-image probe: the right device is visible, torch is the right build, vendor bytes untouched.

It fails closed: a CUDA entry on a machine without a CUDA device stops here with one line, before any
test runs, instead of quietly testing the CPU.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import json
import platform
import re
import sys
from pathlib import Path
from typing import Any

import torch

from torchyard.inimage.checks import vendor
from torchyard.names import ACCELERATOR_NAMES, BACKEND_DISTRIBUTIONS, TORCH_DEVICES, module_name

CPU = torch.device("cpu")  # where references are made and much of the harness computes, on every accelerator


class ProbeError(Exception):
    """The container cannot test what its entry claims; the message says what is missing."""


def torch_device(accelerator: str) -> torch.device:
    if accelerator not in ACCELERATOR_NAMES:
        raise ProbeError(f"unknown accelerator {accelerator!r} (expected one of {', '.join(ACCELERATOR_NAMES)})")
    return torch.device(TORCH_DEVICES[accelerator])


def _build() -> str:
    if torch.version.hip:
        return f"ROCm/HIP {torch.version.hip}"
    if torch.version.cuda:
        return f"CUDA {torch.version.cuda}"
    if getattr(torch.version, "xpu", None):
        return f"XPU {torch.version.xpu}"
    return "CPU-only"


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}".strip().rstrip(":")


def torch_reason(module: Any) -> str:
    """Why torch says the device is unusable, in its own words: `init()` raises the driver's or runtime's
    error (a driver too old for this CUDA build, no driver, a missing runtime library), which
    `is_available()` swallows."""
    init = getattr(module, "init", None)
    if init is None:
        return "torch gives no reason"
    try:
        init()
    except Exception as error:  # torch raises RuntimeError, AssertionError or its own subclasses here
        return f"torch says: {_first_line(error)}"
    return f"torch initialized it, and counts {module.device_count()} device(s)"


def check_kernel(device: torch.device, build: str) -> None:
    """One kernel on the device: a ROCm build without the GPU's target (gfx...) or a CUDA build without
    the GPU's architecture is available and then fails here, not in the middle of a suite."""
    try:
        (torch.ones(4, device=device) + 1).sum().item()
    except Exception as error:
        arches = ""
        if device.type == "cuda":
            arches = f"; this build's GPU targets: {' '.join(torch.cuda.get_arch_list()) or 'none listed'}"
        raise ProbeError(f"a first kernel on {device} failed ({build}): {_first_line(error)}{arches}") from None


def check_device(accelerator: str) -> None:
    build = f"torch {torch.__version__} is a {_build()} build"
    device = torch_device(accelerator)  # an unknown name is a ProbeError
    if accelerator == "cuda":
        if torch.version.cuda is None or torch.version.hip:
            raise ProbeError(f"entry targets CUDA but {build}")
        if not torch.cuda.is_available():
            raise ProbeError(
                f"entry targets CUDA but no CUDA device is usable ({build}; {torch_reason(torch.cuda)}); "
                "check the driver (this build needs the one its CUDA version names) and the container's GPU "
                "request (`torchyard doctor`)"
            )
    elif accelerator == "rocm":
        if not torch.version.hip:
            raise ProbeError(f"entry targets ROCm but {build}")
        if not torch.cuda.is_available():
            raise ProbeError(
                f"entry targets ROCm but no ROCm device is usable ({build}; {torch_reason(torch.cuda)}); "
                "check /dev/kfd, /dev/dri and the render group (`torchyard doctor`)"
            )
    elif accelerator == "xpu" and not (hasattr(torch, "xpu") and torch.xpu.is_available()):
        reason = torch_reason(torch.xpu) if hasattr(torch, "xpu") else "this torch has no torch.xpu"
        raise ProbeError(
            f"entry targets XPU but no XPU device is usable ({build}; {reason}); check Level Zero and Intel's "
            "GPU driver in the image, /dev/dri and the render group (`torchyard doctor`)"
        )
    elif accelerator == "mps" and not torch.backends.mps.is_available():
        built = "built with MPS" if torch.backends.mps.is_built() else "not built with MPS"
        raise ProbeError(
            f"entry targets MPS but no MPS device is available (torch {torch.__version__}, {built}, "
            f"{platform.system()} {platform.machine()}): MPS needs macOS on Apple silicon"
        )
    if device.type != "cpu":
        check_kernel(device, build)


def _version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def backend_versions() -> dict[str, str | None]:
    """The versions of the backends' distributions (torch's build has fields of its own), by module name. One
    installed without metadata of its name (TensorRT's bindings come as tensorrt-cu13) gives its module's
    version, major.minor.patch.build for TensorRT; one not installed, None."""
    found: dict[str, str | None] = {}
    for name in BACKEND_DISTRIBUTIONS:
        module = module_name(name)
        if name != "torch":
            found[module] = _version(name) or _version(module) or _module_version(module)
    return found


def _module_version(module: str) -> str | None:
    if importlib.util.find_spec(module) is None:
        return None
    version = getattr(importlib.import_module(module), "__version__", None)
    return str(version) if version is not None else None


def _cpu_name() -> str:
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        for line in cpuinfo.read_text(errors="replace").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def _driver() -> str | None:
    nvidia = Path("/proc/driver/nvidia/version")
    if nvidia.is_file():
        return nvidia.read_text(errors="replace").splitlines()[0]
    amd = Path("/sys/module/amdgpu/version")
    return amd.read_text().strip() if amd.is_file() else None


def manifest(accelerator: str, precision_settings: dict[str, object], trust: str = "trusted") -> dict[str, Any]:
    """What the report needs to make a result reproducible: versions, device, driver, precision."""
    device = torch_device(accelerator)
    info: dict[str, Any] = {
        "accelerator": accelerator,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "torch": torch.__version__,
        "torch_git": torch.version.git_version,
        "cuda": torch.version.cuda,
        "hip": torch.version.hip,
        "xpu": getattr(torch.version, "xpu", None),
        **backend_versions(),
        "driver": _driver(),
        "device": _cpu_name(),
        "precision": precision_settings,
        "trust": trust,
    }
    if device.type == "cuda" and torch.cuda.is_available():
        properties = torch.cuda.get_device_properties(0)
        info["device"] = properties.name
        info["compute_capability"] = f"{properties.major}.{properties.minor}"
    elif device.type == "xpu" and torch.xpu.is_available():
        info["device"] = torch.xpu.get_device_name(0)
    return info


def probe(
    accelerator: str,
    vendor_record: Path | None,
    precision_settings: dict[str, object],
    unlocked: Path | None = None,
    *,
    trust: str = "trusted",
) -> dict[str, Any]:
    """Raise ProbeError when the container cannot honestly test `accelerator`; else the manifest (with
    the environment's packages and their differences from `unlocked`, the entry's lock, for an unlocked run)."""
    check_device(accelerator)
    if vendor_record is not None:
        if not vendor_record.is_file():
            raise ProbeError(f"vendor record {vendor_record} is missing from the image")
        problems = vendor.verify(json.loads(vendor_record.read_text()), deep=False)
        if problems:
            raise ProbeError("; ".join(problems))
    info = manifest(accelerator, precision_settings, trust)
    if unlocked is not None:
        info.update(unlocked_environment(unlocked))
    return info


def _origin(dist: importlib.metadata.Distribution) -> str:
    """Where a package came from: its PEP 610 direct URL, else the installer that put it there."""
    direct = dist.read_text("direct_url.json")
    if direct:
        data = json.loads(direct)
        return "editable " + str(data.get("url")) if data.get("dir_info", {}).get("editable") else str(data.get("url"))
    return f"index ({(dist.read_text('INSTALLER') or 'unknown installer').strip()})"


def lock_pins(text: str) -> dict[str, str]:
    """`name==version` pins of a hashed lockfile, by normalized name."""
    pins = {}
    for line in text.splitlines():
        match = re.match(r"([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)", line)
        if match:
            pins[re.sub(r"[-_.]+", "-", match[1]).lower()] = match[2]
    return pins


def unlocked_environment(lockfile: Path | str) -> dict[str, Any]:
    """Every installed package (name, version, origin) and how the set differs from the entry's lock."""
    packages: dict[str, dict[str, str]] = {}
    for dist in importlib.metadata.distributions():
        name = re.sub(r"[-_.]+", "-", dist.metadata["Name"] or "").lower()
        if name and name not in packages:
            packages[name] = {"name": name, "version": dist.version, "origin": _origin(dist)}
    path = Path(lockfile) if str(lockfile) else None
    pins = lock_pins(path.read_text(encoding="utf-8", errors="replace")) if path and path.is_file() else {}
    differences = [
        f"{name}: {packages[name]['version'] if name in packages else 'not installed'} (lock: {pins[name]})"
        for name in sorted(pins)
        if name not in packages or packages[name]["version"] != pins[name]
    ]
    differences += [
        f"{name}: {packages[name]['version']} (not in the lock)" for name in sorted(set(packages) - set(pins))
    ]
    return {
        "environment": "unlocked: this environment",
        "lockfile": str(path) if pins else None,
        "packages": sorted(packages.values(), key=lambda package: package["name"]),
        "lock_differences": differences if pins else ["no lockfile to compare with"],
    }
