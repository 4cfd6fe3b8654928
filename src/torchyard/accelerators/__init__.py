"""One module per accelerator, listed in one explicit dict: each difference lives in its module."""

from __future__ import annotations

from torchyard.accelerators import cpu, cuda, mps, rocm, xpu
from torchyard.accelerators.protocol import Accelerator, HostFacts
from torchyard.names import AcceleratorName

ACCELERATORS: dict[AcceleratorName, Accelerator] = {
    "cpu": cpu,
    "cuda": cuda,
    "rocm": rocm,
    "xpu": xpu,
    "mps": mps,
}


def nox_session(name: AcceleratorName) -> str:
    """The nox session that tests entries of this accelerator (the same name CI calls)."""
    return f"test-{name}"


__all__ = ["ACCELERATORS", "Accelerator", "HostFacts", "nox_session"]
