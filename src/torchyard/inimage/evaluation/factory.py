"""A case's factory is checked before the case is judged: two models built under the same seed must hold the
same weights. One that builds others each call (`nn.Parameter(torch.empty(...))` keeps whatever the memory
held, NaN at times; an initializer that draws from an unseeded generator) gives the reference and each backend
a model of its own, and every comparison would blame the backend for the factory."""

from __future__ import annotations

import torch

from torchyard.inimage.cases import Case
from torchyard.inimage.evaluation.cache.digests import tensor_digest

BITS = {1: torch.uint8, 2: torch.int16, 4: torch.int32}  # else int64 (complex128's 16 bytes: two each)


def _tensors(module: torch.nn.Module) -> dict[str, tuple[str, torch.Tensor]]:
    """Each parameter and buffer by name (non-persistent buffers too), with which of the two it is."""
    found: dict[str, tuple[str, torch.Tensor]] = {
        name: ("parameter", value) for name, value in module.named_parameters(remove_duplicate=False)
    }
    found |= {name: ("buffer", value) for name, value in module.named_buffers(remove_duplicate=False)}
    return found


def _same(one: torch.Tensor, other: torch.Tensor) -> bool:
    """Bit for bit (NaN where the other has the same NaN): a deterministic factory builds the same bytes."""
    if (one.layout, one.dtype, one.shape, one.device) != (other.layout, other.dtype, other.shape, other.device):
        return False
    if one.layout == torch.strided and not one.is_quantized and not one.is_meta:
        return torch.equal(_bits(one), _bits(other))
    return tensor_digest(one) == tensor_digest(other)


def _bits(tensor: torch.Tensor) -> torch.Tensor:
    """The tensor's bytes as integers of its element's size (NaN is then a value like any other)."""
    flat = tensor.detach().reshape(-1).contiguous()
    return flat.view(BITS.get(flat.element_size(), torch.int64))


def first_difference(built: torch.nn.Module, again: torch.nn.Module) -> str:
    """The first parameter or buffer that differs between two models of one factory ("" where none does, or
    where torchyard cannot compare them: that is never the case's fault)."""
    ours, theirs = _tensors(built), _tensors(again)
    if list(ours) != list(theirs):
        missing = sorted(set(ours) ^ set(theirs))
        return f"they hold other parameters and buffers ({', '.join(missing[:3]) or 'in another order'})"
    for name, (kind, value) in ours.items():
        try:
            same = _same(value, theirs[name][1])
        except Exception:  # a tensor subclass or layout this cannot read: unjudged, not blamed
            continue
        if not same:
            return f"{kind} {name}"
    return ""


def nondeterministic(case_name: str, built: torch.nn.Module, again: torch.nn.Module) -> str:
    """Why the case's factory cannot be judged ("" where its two models are alike)."""
    differs = first_difference(built, again)
    if not differs:
        return ""
    return (
        f"case {case_name!r}: its factory builds different weights each call ({differs} differs between two "
        "models built under the same seed): make it deterministic, initialize every parameter and buffer "
        "(torch.empty leaves whatever the memory held) and draw from torch's seeded generator"
    )


def factory_differs(case: Case) -> str:
    """Why the case's factory cannot be judged ("" where it can): two models built, compared."""
    first = case.module()  # held while the second is built: no memory of its is handed out again
    return nondeterministic(case.name, first, case.module())
