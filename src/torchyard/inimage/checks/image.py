"""What a built image must hold before any test runs, checked as the build's last step.

Each accelerator's module (host side) names its checks; this module knows how to look for each one. It
reads files only: nothing is imported from torch or Triton (torch's build is read from `torch/version.py`),
so it runs in a second on any image, and a device is not needed. A missing piece is one line that names
it and what provides it; the build fails on it, and no image is tagged.
"""

from __future__ import annotations

import ast
import ctypes.util
import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
from collections.abc import Callable, Sequence
from pathlib import Path

from torchyard.contract import TORCH_COMPANIONS, build_family

LIBRARY_DIRS = ("/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib", "/usr/local/lib")
INCLUDE_DIRS = ("/usr/include", "/usr/local/include")


def _package_dir(name: str) -> Path | None:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def version_constants(package: str = "torch") -> dict[str, object]:
    """The constants of a package's `version.py` (torch's: cuda, hip, xpu, __version__), read without importing
    it."""
    folder = _package_dir(package)
    version = folder / "version.py" if folder else None
    if version is None or not version.is_file():
        return {}
    found: dict[str, object] = {}
    for node in ast.parse(version.read_text(encoding="utf-8")).body:
        target = node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else None
        if isinstance(node, ast.AnnAssign):
            target = node.target
        value = node.value if isinstance(node, (ast.Assign, ast.AnnAssign)) else None
        if isinstance(target, ast.Name) and isinstance(value, ast.Constant):
            found[target.id] = value.value
    return found


def find_library(stem: str, extra: Sequence[Path] = ()) -> Path | str | None:
    """`lib<stem>.so*` in the linker's cache, LD_LIBRARY_PATH, the usual folders or `extra`."""
    folders = [*extra, *(Path(p) for p in os.environ.get("LD_LIBRARY_PATH", "").split(":") if p)]
    folders += [Path(p) for p in LIBRARY_DIRS]
    for folder in folders:
        found = sorted(folder.glob(f"lib{stem}.so*")) if folder.is_dir() else []
        if found:
            return found[0]
    return ctypes.util.find_library(stem)


def _torch_lib() -> list[Path]:
    folder = _package_dir("torch")
    return [folder / "lib"] if folder else []


def check_gcc() -> str | None:
    missing = [tool for tool in ("gcc", "g++") if shutil.which(tool) is None]
    if missing:
        return f"{' and '.join(missing)} (inductor compiles C++ kernels and Triton launchers): apt-get install g++"
    return None


def check_python_headers() -> str | None:
    header = Path(sysconfig.get_paths()["include"]) / "Python.h"
    if header.is_file():
        return None
    return f"{header} (inductor and Triton compile against Python's headers): apt-get install python3.X-dev"


def check_torch() -> str | None:
    return None if _package_dir("torch") else "torch (the entry's lock, or the base's vendor torch)"


def _build_of(key: str, words: str) -> str | None:
    build = version_constants()
    if build.get(key):
        return None
    builds = {"cuda": "a CUDA build", "hip": "a ROCm (HIP) build", "xpu": "an XPU build"}
    found = next((words for name, words in builds.items() if build.get(name)), "a CPU-only build")
    version = build.get("__version__", "absent")
    return f"{words} (torch {version} is {found}): lock torch from the accelerator's index, or keep the base's"


def check_torch_companions() -> str | None:
    """torchvision and torchaudio built for the torch beside them: PyPI's torchvision (a CUDA build) beside torch's
    CPU build fails at import (`operator torchvision::nms does not exist`)."""
    torch_version = str(version_constants().get("__version__", ""))
    family = build_family(torch_version.partition("+")[2])
    if family is None:
        return None
    problems = []
    for name in TORCH_COMPANIONS:
        version = str(version_constants(name).get("__version__", ""))
        tag = version.partition("+")[2]
        theirs = build_family(tag)
        if theirs is not None and theirs != family:
            problems.append(
                f"{name} built for torch {torch_version} ({name} {version} is for torch's {tag} build, and fails at "
                f"import): take {name} from the index torch comes from"
            )
    return "; missing ".join(problems) or None


def check_torch_cuda() -> str | None:
    return _build_of("cuda", "torch's CUDA build")


def check_torch_hip() -> str | None:
    return _build_of("hip", "torch's ROCm (HIP) build")


def check_torch_xpu() -> str | None:
    return _build_of("xpu", "torch's XPU build")


def check_triton_ptxas() -> str | None:
    """Triton's bundled ptxas (or TRITON_PTXAS_PATH), and that it runs: inductor's GPU kernels need it."""
    configured = os.environ.get("TRITON_PTXAS_PATH")
    folder = _package_dir("triton")
    if configured:
        ptxas = Path(configured)
    elif folder is not None:
        ptxas = folder / "backends" / "nvidia" / "bin" / "ptxas"
    else:
        return "triton (torch's CUDA build depends on it; it compiles inductor's GPU kernels)"
    try:
        subprocess.run([str(ptxas), "--version"], check=True, capture_output=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as error:
        return f"Triton's ptxas at {ptxas} does not run ({type(error).__name__}): reinstall triton from the lock"
    return None


def check_rocm_runtime() -> str | None:
    rocm = Path(os.environ.get("ROCM_PATH", "/opt/rocm")) / "lib"
    if find_library("amdhip64", [*_torch_lib(), rocm]):
        return None
    return "ROCm's HIP runtime (libamdhip64.so, in /opt/rocm/lib on AMD's images): build on a ROCm base"


def check_level_zero_loader() -> str | None:
    if find_library("ze_loader", _torch_lib()):
        return None
    return "Level Zero's loader (libze_loader.so.1; apt: libze1)"


def check_level_zero_driver() -> str | None:
    if find_library("ze_intel_gpu", _torch_lib()):
        return None
    return "Intel's Level Zero GPU driver (libze_intel_gpu.so.1; apt: libze-intel-gpu1, formerly intel-level-zero-gpu)"


def check_level_zero_headers() -> str | None:
    if any((Path(folder) / "level_zero" / "ze_api.h").is_file() for folder in INCLUDE_DIRS):
        return None
    return "Level Zero's headers (level_zero/ze_api.h; Triton's XPU backend compiles against them; apt: libze-dev)"


CHECKS: dict[str, Callable[[], str | None]] = {
    "gcc": check_gcc,
    "python-headers": check_python_headers,
    "torch": check_torch,
    "torch-companions": check_torch_companions,
    "torch-cuda": check_torch_cuda,
    "torch-hip": check_torch_hip,
    "torch-xpu": check_torch_xpu,
    "triton-ptxas": check_triton_ptxas,
    "rocm-runtime": check_rocm_runtime,
    "level-zero-loader": check_level_zero_loader,
    "level-zero-driver": check_level_zero_driver,
    "level-zero-headers": check_level_zero_headers,
}


def main(argv: Sequence[str] | None = None) -> int:
    names = list(sys.argv[1:] if argv is None else argv)
    unknown = [name for name in names if name not in CHECKS]
    if unknown:
        print(f"image check: unknown check {unknown[0]!r} (known: {', '.join(CHECKS)})", file=sys.stderr)
        return 2
    missing = [problem for name in names if (problem := CHECKS[name]()) is not None]
    if missing:
        print("image check: missing " + "; missing ".join(missing), file=sys.stderr)
        return 1
    print(f"image check: {', '.join(names) or 'nothing asked'}: found")
    return 0


if __name__ == "__main__":
    sys.exit(main())
