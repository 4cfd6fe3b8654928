"""What localization answers: the first node of the exported program whose output leaves the bounds while its
inputs are still within them, or why none was named."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from torchyard.inimage.evaluation.metrics import Comparison


@dataclass(frozen=True)
class NodeDivergence:
    """One node of the exported program, its error against the reference and its inputs' errors."""

    node: str  # its name in the exported program's graph
    operator: str  # the ATen operator it calls ("aten.gelu.default")
    source: str  # the model's line that made it ("model.py:61 in forward"), "" where the trace kept none
    error: Comparison
    inputs: tuple[tuple[str, Comparison], ...]  # each compared input node's name and error, all within bounds
    delegate: str = ""  # ExecuTorch: what ran it ("XnnpackBackend" or "portable kernel"); "" elsewhere

    def as_dict(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "operator": self.operator,
            "source": self.source,
            "error": self.error.as_dict(),
            "inputs": [{"node": name, **error.as_dict()} for name, error in self.inputs],
            "delegate": self.delegate,
        }


# A note's start where the backend's stack cannot be localized (ExecuTorch without taps): nothing was looked at.
NOT_LOCALIZED = "not localized: "


@dataclass(frozen=True)
class Localization:
    """Where `backend` first diverges on a case's first call. `node` is None when no node was named: `note` says
    why (no node leaves the bounds, no reference could be made, or the time bound ran out)."""

    backend: str
    node: NodeDivergence | None
    compared: int  # how many nodes were compared
    seconds: float
    note: str = ""
    pass_name: str = ""  # inductor: the backend and pass the bisector named ("inductor: post_grad_passes")
    reference: str = ""  # what the nodes were compared with: "float64 on cpu", or float32 and why

    def as_dict(self) -> dict[str, Any]:
        return {
            "backend": self.backend,
            "node": self.node.as_dict() if self.node is not None else None,
            "compared": self.compared,
            "seconds": round(self.seconds, 3),
            "note": self.note,
            "pass": self.pass_name,
            "reference": self.reference,
        }
