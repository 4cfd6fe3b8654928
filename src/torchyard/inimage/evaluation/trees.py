"""Inputs and outputs as pytrees: device moves go leaf by leaf, and every backend's outputs become a flat
list of leaves, compared leaf by leaf, each named by its path."""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Mapping
from typing import cast

import torch
from torch.utils import _pytree as pytree

from torchyard.inimage.cases import Call

# One output leaf: a tensor (a Python int or float becomes one, as torch.export makes it), or any other
# value a model returns (None, a bool, a string: an optional head, a flag, a label), compared by equality.
Leaf = torch.Tensor | object


def register_tree_types(tree: object) -> None:
    """Make every dataclass and named tuple type in `tree` a pytree node that torch.export can save (and
    ExecuTorch, which saves the same tree spec), each under its qualified name: a dataclass through
    `torch.export.register_dataclass`, a named tuple through pytree's `_register_namedtuple`, torch's only
    route for one (`NAMEDTUPLE_ROUTE`). A type registered already, by the model's own code, is left as it is."""
    if dataclasses.is_dataclass(tree) and not isinstance(tree, type):
        if type(tree) not in pytree.SUPPORTED_NODES:
            torch.export.register_dataclass(type(tree), serialized_type_name=_serialized_name(type(tree)))
        for item in dataclasses.fields(tree):
            register_tree_types(getattr(tree, item.name))
    elif isinstance(tree, dict):
        for value in tree.values():
            register_tree_types(value)
    elif isinstance(tree, list | tuple):
        registered = getattr(pytree, "SUPPORTED_SERIALIZED_TYPES", {})
        if NAMEDTUPLE_ROUTE is not None and _is_namedtuple(tree) and type(tree) not in registered:
            NAMEDTUPLE_ROUTE(type(tree), serialized_type_name=_serialized_name(type(tree)))
        for value in tree:
            register_tree_types(value)


def _namedtuple_route() -> Callable[..., None] | None:
    """`torch.utils._pytree._register_namedtuple(cls, *, serialized_type_name)`, where it is as torch 2.4 to
    2.14 have it: torch.export.save and ExecuTorch refuse a named tuple in a tree spec unless it is registered
    so, and torch offers no public route. None where its shape changed: the save then fails with torch's own
    one line, which names the type (`test_report_lines` fails first, where the route is gone)."""
    route = getattr(pytree, "_register_namedtuple", None)
    if route is None or "serialized_type_name" not in inspect.signature(route).parameters:
        return None
    return cast(Callable[..., None], route)


NAMEDTUPLE_ROUTE = _namedtuple_route()


def _is_namedtuple(value: object) -> bool:
    return isinstance(value, tuple) and isinstance(getattr(type(value), "_fields", None), tuple)


def _serialized_name(klass: type) -> str:
    """`module.QualifiedName`, numbered where another type of that name has it (two local classes, say)."""
    name, number = f"{klass.__module__}.{klass.__qualname__}", 1
    taken = getattr(pytree, "SERIALIZED_TYPE_TO_PYTHON_TYPE", {})
    while taken.get(name if number == 1 else f"{name}#{number}", klass) is not klass:
        number += 1
    return name if number == 1 else f"{name}#{number}"


def leaves(value: object) -> list[Leaf]:
    """The output's leaves in pytree order: tensors, numbers as tensors, anything else as it is."""
    register_tree_types(value)
    flat = pytree.tree_leaves(value)
    return [
        torch.tensor(leaf) if isinstance(leaf, int | float) and not isinstance(leaf, bool) else leaf for leaf in flat
    ]


def leaf_paths(value: object) -> list[str]:
    """Each output leaf's path, as a person reads it: `["action"][0]`; "" for a bare tensor."""
    register_tree_types(value)
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


PLAIN_LEAVES = (torch.Tensor, int, float, bool, complex, str, bytes, type(None), torch.dtype, torch.device)


def opaque(tree: object, where: str) -> str:
    """Why `tree` cannot be compared leaf by leaf, where one of its leaves is an object of a class torch's pytree
    cannot see into that holds tensors (a `NestedTensor` of a tensor and a mask): its tensors would be neither
    moved, cast nor compared. "" where every leaf is plain, or a registered node's."""
    register_tree_types(tree)
    for path, leaf in zip(_paths(tree, ""), pytree.tree_leaves(tree), strict=True):
        if isinstance(leaf, PLAIN_LEAVES):
            continue
        held = _tensors_held(leaf)
        if held:
            klass = type(leaf)
            return (
                f"{(where + path).strip()} is a {klass.__module__}.{klass.__qualname__}, whose tensors "
                f"({', '.join(held)}) torch's pytree cannot see into: register the class as a pytree node "
                "(torch.utils._pytree.register_pytree_node, or make it a dataclass; docs/how-to/own-cases.md, "
                '"Inputs and outputs of your own types")'
            )
    return ""


def opaque_inputs(calls: list[Call]) -> str:
    """`opaque` of the first call whose positional or keyword inputs hold such an object ("" where none does)."""
    for call in calls:
        unseen = opaque(call.args, "the case's input ") or opaque(dict(call.kwargs), "the case's keyword input ")
        if unseen:
            return unseen
    return ""


def _tensors_held(value: object) -> list[str]:
    """The attributes of `value` that hold a tensor, directly or in a list, tuple or dict one level down."""
    try:
        attributes = dict(vars(value))
    except TypeError:  # no __dict__: its slots, where it has them
        attributes = {
            name: getattr(value, name)
            for klass in type(value).__mro__
            for name in getattr(klass, "__slots__", ())
            if isinstance(name, str) and hasattr(value, name)
        }
    held = []
    for name, item in attributes.items():
        inner = item.values() if isinstance(item, dict) else item if isinstance(item, list | tuple) else (item,)
        if any(isinstance(part, torch.Tensor) for part in inner):
            held.append(name)
    return held


def to_device(call: Call, device: torch.device, dtype: torch.dtype | None = None) -> Call:
    """Tensor leaves to `device` (floating ones to `dtype` when given); other leaves unchanged."""
    register_tree_types((call.args, dict(call.kwargs)))

    def move(value: object) -> object:
        if not isinstance(value, torch.Tensor):
            return value
        if dtype is not None and value.is_floating_point():
            return value.to(dtype=dtype).to(device)  # cast on the CPU first: MPS has no float64 to move
        return value.to(device)

    args, kwargs = pytree.tree_map(move, (call.args, dict(call.kwargs)))
    return Call(tuple(args), kwargs)
