"""Pinned precision for parity runs, and the field's mixed-precision rules."""

from __future__ import annotations

import os

import torch

from torchyard.names import PRECISION_DTYPES, Precision

DTYPES: dict[Precision, torch.dtype] = {name: getattr(torch, dtype) for name, dtype in PRECISION_DTYPES.items()}


class PrecisionError(Exception):
    """A precision the device cannot honour: it would run, silently, at another one."""


def pin_precision() -> dict[str, object]:
    """Turn TF32 off everywhere and ask for full float32 matmuls; return what was set, for the report.

    `NVIDIA_TF32_OVERRIDE=0` only takes effect before CUDA initialises, so this runs at pytest start-up.
    """
    os.environ["NVIDIA_TF32_OVERRIDE"] = "0"
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    return {
        "NVIDIA_TF32_OVERRIDE": os.environ["NVIDIA_TF32_OVERRIDE"],
        "torch.backends.cuda.matmul.allow_tf32": torch.backends.cuda.matmul.allow_tf32,
        "torch.backends.cudnn.allow_tf32": torch.backends.cudnn.allow_tf32,
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
    }


def check_precision(
    precision: Precision,
    device_type: str,
    capability: tuple[int, int] | None = None,
    *,
    hip: bool | None = None,
    macos: tuple[int, int] | None = None,
) -> None:
    """Refuse combinations that would not run at the asked precision (`hip`: a ROCm build; default: this
    torch's build, so the rule can be checked for CUDA on any machine; `macos`: the Mac's version for MPS).

    MPS has no float64 at all: the reference stays on the CPU, and runs on MPS are float32 or lower."""
    hip = bool(torch.version.hip) if hip is None else hip
    if precision == "fp16" and device_type == "cpu":
        raise PrecisionError(
            "fp16 on the CPU is refused: CPU kernels would silently compute in full precision; use bf16 or fp32"
        )
    if device_type == "mps" and precision == "bf16" and macos is not None and macos < (14, 0):
        found = ".".join(str(part) for part in macos)
        raise PrecisionError(f"bf16 on MPS needs macOS 14 or newer; this Mac runs {found}")
    needs_ampere = precision == "bf16" and device_type == "cuda" and not hip
    if needs_ampere and (capability is None or capability < (8, 0)):
        found = "unknown" if capability is None else f"{capability[0]}.{capability[1]}"
        raise PrecisionError(f"bf16 on CUDA needs compute capability 8.0 (Ampere) or newer; this GPU has {found}")
