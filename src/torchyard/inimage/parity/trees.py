"""Inputs and outputs as pytrees: device moves go leaf by leaf, and every backend's outputs become a flat
list of leaves, compared leaf by leaf, each named by its path."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import torch
from torch.utils import _pytree as pytree

from torchyard.inimage.cases import Call

# One output leaf: a tensor (a Python int or float becomes one, as torch.export makes it), or any other
# value a model returns (None, a bool, a string: an optional head, a flag, a label), compared by equality.
Leaf = torch.Tensor | object


def register_dataclasses(tree: object) -> None:
    """Make every dataclass type in `tree` a pytree node (torch.export needs them registered)."""
    if dataclasses.is_dataclass(tree) and not isinstance(tree, type):
        if type(tree) not in pytree.SUPPORTED_NODES:
            torch.export.register_dataclass(type(tree))
        for item in dataclasses.fields(tree):
            register_dataclasses(getattr(tree, item.name))
    elif isinstance(tree, dict):
        for value in tree.values():
            register_dataclasses(value)
    elif isinstance(tree, list | tuple):
        for value in tree:
            register_dataclasses(value)


def leaves(value: object) -> list[Leaf]:
    """The output's leaves in pytree order: tensors, numbers as tensors, anything else as it is."""
    register_dataclasses(value)
    flat = pytree.tree_leaves(value)
    return [
        torch.tensor(leaf) if isinstance(leaf, int | float) and not isinstance(leaf, bool) else leaf for leaf in flat
    ]


def leaf_paths(value: object) -> list[str]:
    """Each output leaf's path, as a person reads it: `["action"][0]`; "" for a bare tensor."""
    register_dataclasses(value)
    return _paths(value, "")


def _paths(value: object, prefix: str) -> list[str]:
    try:
        flat, _ = pytree.tree_flatten_with_path(value)
    except ValueError:  # a node type registered without key paths (diffusers' BaseOutput): walked one level here
        pass
    else:
        return [prefix + pytree.keystr(path) for path, _ in flat]
    children, context = pytree.SUPPORTED_NODES[type(value)].flatten_fn(value)
    keyed = isinstance(value, Mapping) and isinstance(context, list | tuple) and len(context) == len(children)
    names = list(context) if keyed else list(range(len(children)))
    return [path for name, child in zip(names, children, strict=True) for path in _paths(child, f"{prefix}[{name!r}]")]


def to_device(call: Call, device: torch.device, dtype: torch.dtype | None = None) -> Call:
    """Tensor leaves to `device` (floating ones to `dtype` when given); other leaves unchanged."""
    register_dataclasses((call.args, dict(call.kwargs)))

    def move(value: object) -> object:
        if not isinstance(value, torch.Tensor):
            return value
        if dtype is not None and value.is_floating_point():
            return value.to(dtype=dtype).to(device)  # cast on the CPU first: MPS has no float64 to move
        return value.to(device)

    args, kwargs = pytree.tree_map(move, (call.args, dict(call.kwargs)))
    return Call(tuple(args), kwargs)
