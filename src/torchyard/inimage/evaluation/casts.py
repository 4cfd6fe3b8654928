"""Where a model computes below float64 although it is given float64: the first operation that turns a float64
tensor into a narrower float inside its forward (`x.float()`, `x.to(torch.float32)`, a float32 constant
it mixes in), named by the model's own line, so a report can say what makes its reference no finer than
the run, and what to do about it."""

from __future__ import annotations

import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils import _pytree as pytree

TORCH = Path(torch.__file__).resolve().parent
TORCHYARD = Path(__file__).resolve().parents[3]


class _FirstNarrowing(TorchFunctionMode):
    """Records the first call whose float64 input gives a narrower floating output, where it was made."""

    def __init__(self, depth: int) -> None:
        super().__init__()
        self.found: str = ""
        self.depth = depth  # the frames above the model's call: never the model's

    def __torch_function__(
        self, func: Callable[..., Any], types: Any, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None
    ) -> Any:
        result = func(*args, **(kwargs or {}))
        if not self.found:
            given = [leaf for leaf in pytree.tree_leaves((args, kwargs)) if isinstance(leaf, torch.Tensor)]
            made = [leaf for leaf in pytree.tree_leaves(result) if isinstance(leaf, torch.Tensor)]
            wide = any(tensor.dtype == torch.float64 for tensor in given)
            narrow = any(tensor.is_floating_point() and tensor.dtype != torch.float64 for tensor in made)
            if wide and narrow:
                self.found = _models_line(getattr(func, "__name__", str(func)), self.depth)
        return result


def _models_line(name: str, depth: int) -> str:
    """`model.py:42 in forward: `x.float()` (float)`: the innermost frame outside torch and torchyard; "" where
    there is none (a model of torchyard's own, or a cast torch makes)."""
    for frame in reversed(traceback.extract_stack()[depth:]):  # its own frames are torchyard's, passed over
        where = Path(frame.filename).resolve()
        if not where.is_relative_to(TORCH) and not where.is_relative_to(TORCHYARD):
            code = f": `{frame.line.strip()}`" if frame.line else ""
            return f"{where.name}:{frame.lineno} in {frame.name}{code} ({name})"
    return ""


def first_narrowing(module: torch.nn.Module, call: Callable[[torch.nn.Module], object]) -> str:
    """Where `call(module)` (the model in float64) first computes in a narrower float, before any error that
    narrowing then causes (a float32 tensor meeting float64 weights); "" where it never does."""
    mode = _FirstNarrowing(len(traceback.extract_stack()))
    try:
        with torch.no_grad(), mode:
            call(module)
    except Exception:
        pass  # what failed is said already; where the model narrowed before it is what this adds
    return mode.found
