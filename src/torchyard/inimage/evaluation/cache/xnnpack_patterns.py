"""XNNPACK's pattern graphs, kept in the entry's artifact cache instead of made again by every process.

Every XNNPACK lowering runs two of ExecuTorch's passes that match pattern graphs (`ConvertToSDPAPass`,
`ConvertToUpsampleBilinear2d`), whose modules make them once per process by exporting and lowering six small
programs: more than a small case's own lowering. `prime` keeps them as JSON, keyed by the versions the
artifact keys name, the Python version and the pattern modules' sources, and hands them to the passes through
the modules' own functions. A miss stores only graphs that decode to what they were (`faithful`); a hit is
read through the cache's digest, and one that does not decode leaves the modules as they are. The patterns
only choose how a program is lowered: every program is still run and compared.
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
import json
import keyword
import platform
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any, Literal

import torch
from torch.fx import Graph, GraphModule, Node

from torchyard import contract
from torchyard.inimage.evaluation.cache.artifacts import ArtifactCache, entry_cache
from torchyard.inimage.evaluation.cache.keys import versions

FORMAT = 2
PATTERN_OPS = frozenset({"placeholder", "call_function", "output"})
SUFFIX = ".patterns.json"
PATTERN_MODULES = (
    "executorch.backends.xnnpack.partition.graphs.sdpa",
    "executorch.backends.xnnpack.partition.graphs.bilinear_2d",
)
PYTHON_MODULES = {"_operator", "operator", "builtins"}  # where a plain Python target (getitem) may come from
Primed = Literal["hit", "miss", "rebuilt", "live", "off", "absent"]
_primed: list[Primed] = []  # what this process did, once


class Unstorable(Exception):
    """A graph the encoding cannot reproduce exactly."""


def store_for(env: Mapping[str, str]) -> ArtifactCache:
    """The entry's artifact cache (the run's environment names its cache root), or none: where the run
    has no cache of its own, or turned the artifact cache off."""
    root = env.get(contract.INDUCTOR_CACHE)
    return entry_cache(env, Path(root) if root else None)


def prime(store: ArtifactCache) -> Primed:
    """The pattern graphs for this process's XNNPACK lowerings, from `store`, once per process (see `load_into`);
    "absent" where this ExecuTorch has no such modules."""
    if not _primed:
        try:
            modules = [importlib.import_module(name) for name in PATTERN_MODULES]
        except ImportError:
            modules = []
        _primed.append(load_into(store, *modules) if modules else "absent")
    return _primed[0]


def load_into(store: ArtifactCache, sdpa: ModuleType, bilinear: ModuleType) -> Primed:
    """Give the modules' pattern functions the graphs stored in `store`: "hit" (loaded), "miss" or "rebuilt"
    (made by the modules' own functions and stored; their `lru_cache` keeps them), "live" (made and not
    stored, or a stored entry that does not decode: the functions are left as they are), "off" (no store),
    "absent" (the modules lack the functions)."""
    make_sdpa, make_bilinear = getattr(sdpa, "get_graphs", None), getattr(bilinear, "get_graphs_dict", None)
    if make_sdpa is None or make_bilinear is None:
        return "absent"
    if store.root is None:
        return "off"
    try:
        key = pattern_key(sdpa, bilinear)
    except (OSError, TypeError):  # no source to read (an install without it): nothing to key them by
        return "live"
    with tempfile.TemporaryDirectory(prefix="torchyard-patterns-") as folder:
        target = Path(folder) / f"patterns{SUFFIX}"
        try:
            _, state = store.materialize(key, SUFFIX, target, lambda path: _make(path, make_sdpa, make_bilinear))
        except Unstorable:
            return "live"
        if state != "hit":
            return "rebuilt" if state == "rebuilt" else "miss"
        try:
            document = json.loads(target.read_text(encoding="utf-8"))
            sdpa_graphs = [decode(nodes) for nodes in document["sdpa"]]
            bilinear_graphs = {decode(nodes): align_corners for nodes, align_corners in document["bilinear"]}
        except Exception:  # an op this ExecuTorch lacks, a document of another shape: made afresh instead
            return "live"
    # The passes call these by module attribute: they now hand out the loaded graphs.
    sdpa.get_graphs = lambda: sdpa_graphs  # type: ignore[attr-defined]
    bilinear.get_graphs_dict = lambda: bilinear_graphs  # type: ignore[attr-defined]
    bilinear.get_graphs = lambda: list(bilinear_graphs)  # type: ignore[attr-defined]
    return "hit"


def pattern_key(*modules: ModuleType) -> str:
    """What decides the patterns: the versions the artifact keys name, Python's, the pattern modules' code."""
    document = {
        "format": FORMAT,
        "what": "xnnpack-patterns",
        "versions": versions(),
        "python": platform.python_version(),
        "sources": [hashlib.sha256(inspect.getsource(module).encode()).hexdigest() for module in modules],
    }
    return hashlib.sha256(json.dumps(document, sort_keys=True).encode()).hexdigest()


def _make(
    path: Path, make_sdpa: Callable[[], list[GraphModule]], make_bilinear: Callable[[], dict[GraphModule, bool]]
) -> dict[str, Any]:
    """ExecuTorch's own graphs, encoded into `path` once each decodes to a graph equal to it."""
    sdpa_graphs, bilinear_graphs = make_sdpa(), make_bilinear()
    document = {
        "format": FORMAT,
        "sdpa": [faithful(graph) for graph in sdpa_graphs],
        "bilinear": [[faithful(graph), align_corners] for graph, align_corners in bilinear_graphs.items()],
    }
    path.write_text(json.dumps(document), encoding="utf-8")
    return {}


def faithful(graph: GraphModule) -> dict[str, Any]:
    """`graph` encoded with how it prints, once its decoding has been checked to print as it does and to
    match it."""
    from torch.fx.passes.utils.matcher_utils import SubgraphMatcher

    stored = {"nodes": encode(graph), "print": str(graph.graph)}
    try:
        decoded = decode(json.loads(json.dumps(stored)))
    except Exception as error:  # a module's attribute or submodule (get_attr, call_module) is not written
        raise Unstorable(f"a pattern does not decode: {error}") from error
    if str(decoded.graph) != str(graph.graph):
        raise Unstorable("a decoded pattern does not print as its original")
    if not SubgraphMatcher(decoded.graph, ignore_literals=True).match(graph.graph):
        raise Unstorable("a decoded pattern does not match its original")
    return stored


def encode(graph: GraphModule) -> list[list[Any]]:
    """Each node as [op, name, target, args, kwargs]; `Unstorable` for what cannot be written as JSON."""
    return [
        [node.op, node.name, _target(node.target), _value(node.args), _value(node.kwargs)] for node in graph.graph.nodes
    ]


def _identifier(value: object) -> str:
    if not isinstance(value, str) or not value.isidentifier() or keyword.iskeyword(value):
        raise ValueError(f"not a plain identifier: {str(value)[:80]!r}")
    return value


def decode(stored: Mapping[str, Any]) -> GraphModule:
    """The stored graph, checked before any code is generated from it: FX pastes node names and placeholder
    targets into the `forward` it generates and executes, so each must be a plain identifier, the ops are the
    three a pattern has, and the graph must print as the entry recorded it before a `GraphModule` is made."""
    graph, made = Graph(), dict[str, Node]()
    for op, name, target, args, kwargs in stored["nodes"]:
        if op not in PATTERN_OPS:
            raise ValueError(f"an op a pattern does not have: {str(op)[:40]!r}")
        resolved = _resolve(target)
        if op == "placeholder":
            _identifier(resolved)
        node = graph.create_node(op, resolved, _unvalue(args, made), _unvalue(kwargs, made), name=_identifier(name))
        if node.name != name:  # FX renamed it (a clash): the entry is not what was stored
            raise ValueError(f"node {name!r} does not keep its name")
        made[name] = node
    if str(graph) != stored["print"]:
        raise ValueError("the decoded graph does not print as stored")
    return GraphModule(torch.nn.Module(), graph)


def _target(target: object) -> dict[str, Any]:
    if isinstance(target, str):  # a placeholder's or an output's
        return {"name": target}
    # An edge op wraps the ATen op it stands for (an ATen op's own `_op` is its C++ callable).
    edge = not isinstance(target, torch._ops.OpOverload)
    op = getattr(target, "_op", None) if edge else target
    if isinstance(op, torch._ops.OpOverload):
        namespace, name = op._schema.name.split("::", 1)
        return {"edge" if edge else "aten": [namespace, name, op._schema.overload_name or "default"]}
    module, qualname = getattr(target, "__module__", None), getattr(target, "__qualname__", None)
    if module in PYTHON_MODULES and isinstance(qualname, str):
        return {"python": [module, qualname]}
    raise Unstorable(f"a target this encoding does not know: {target!r}")


def _resolve(target: dict[str, Any]) -> Any:
    ((kind, value),) = target.items()
    if kind == "name":
        return value
    if kind == "python":  # only the modules an encoding names: an entry imports nothing else
        if value[0] not in PYTHON_MODULES:
            raise ValueError(f"a target in a module the encoding does not name: {value[0]}")
        return getattr(importlib.import_module(value[0]), value[1])
    if kind == "aten":
        return _op(torch.ops, *value)
    if kind == "edge":
        from executorch.exir.dialects._ops import ops as exir_ops

        return _op(exir_ops.edge, *value)
    raise ValueError(f"an unknown target kind: {kind}")


def _op(namespaces: Any, namespace: str, name: str, overload: str) -> Any:
    return getattr(getattr(getattr(namespaces, namespace), name), overload)


TORCH_ENUMS = {"dtype": torch.dtype, "memory_format": torch.memory_format, "layout": torch.layout}


def _value(value: object) -> Any:
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, Node):
        return {"node": value.name}
    if type(value) is tuple:  # not a subclass (torch.Size, a named tuple): those are not written
        return {"tuple": [_value(item) for item in value]}
    if isinstance(value, list):  # fx's immutable_list among them
        return {"list": [_value(item) for item in value]}
    if isinstance(value, dict):
        return {"dict": [[str(key), _value(item)] for key, item in value.items()]}
    for kind, klass in TORCH_ENUMS.items():
        if isinstance(value, klass):
            return {kind: str(value).removeprefix("torch.")}
    if isinstance(value, torch.device):
        return {"device": str(value)}
    raise Unstorable(f"a literal this encoding does not know: {value!r}")


def _unvalue(value: Any, made: dict[str, Node]) -> Any:
    if not isinstance(value, dict):
        return value
    ((kind, item),) = value.items()
    if kind == "node":
        return made[item]
    if kind == "tuple":
        return tuple(_unvalue(part, made) for part in item)
    if kind == "list":
        return [_unvalue(part, made) for part in item]
    if kind == "dict":
        return {key: _unvalue(part, made) for key, part in item}
    if kind in TORCH_ENUMS:
        found = getattr(torch, item)
        if not isinstance(found, TORCH_ENUMS[kind]):
            raise ValueError(f"torch.{item} is not a {kind}")
        return found
    if kind == "device":
        return torch.device(item)
    raise ValueError(f"an unknown literal kind: {kind}")
