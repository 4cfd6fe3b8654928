"""XNNPACK's pattern graphs kept in the artifact cache (`evaluation.cache.xnnpack_patterns`): made once and stored only
when they decode exactly, loaded on a hit, made again when the entry is corrupt, never used when they do not
decode; ExecuTorch's edge ops come back as ExecuTorch's own."""

from __future__ import annotations

import importlib.util
import json
import threading
from pathlib import Path
from types import ModuleType

import pytest
import torch
from torch.fx import Graph
from torch.fx.passes.utils.matcher_utils import SubgraphMatcher

from torchyard import contract
from torchyard.inimage.evaluation.backends import unavailable_reason
from torchyard.inimage.evaluation.cache import xnnpack_patterns
from torchyard.inimage.evaluation.cache.artifacts import ArtifactCache
from torchyard.inimage.evaluation.cache.xnnpack_patterns import (
    SUFFIX,
    decode,
    faithful,
    load_into,
    pattern_key,
    store_for,
)
from torchyard.names import LOWERING_SUITES

pytestmark = pytest.mark.harness(*LOWERING_SUITES)  # XNNPACK lowers programs for inference only

# Stand-ins for ExecuTorch's two pattern modules: the same functions, cached the same way, over ATen graphs
# with the kinds of literal the real patterns hold (floats, -inf, int lists, dtypes, keywords, getitem).
PATTERNS = """
import functools
import operator

import torch
from torch.fx import Graph, GraphModule

MADE = []


def _graph(scale):
    graph = Graph()
    q, mask = graph.placeholder("q"), graph.placeholder("mask")
    scaled = graph.call_function(torch.ops.aten.mul.Scalar, (q, scale))
    turned = graph.call_function(torch.ops.aten.permute.default, (scaled, {dims}))
    cast = graph.call_function(
        torch.ops.aten._to_copy.default, (turned,), {{"dtype": torch.float16, "memory_format": torch.contiguous_format}}
    )
    masked = graph.call_function(torch.ops.aten.add.Tensor, (cast, mask))
    parts = graph.call_function(torch.ops.aten.split.Tensor, (masked, 2, -1))
    first = graph.call_function(operator.getitem, (parts, 0))
    graph.output((first, None))
    return GraphModule(torch.nn.Module(), graph)


@functools.lru_cache(maxsize=None)
def get_graphs():
    MADE.append("sdpa")
    return [_graph(0.125), _graph(float("-inf"))]


@functools.lru_cache(maxsize=None)
def get_graphs_dict():
    MADE.append("bilinear")
    return {{_graph(2.0): True, _graph(0.5): False}}
"""


def stand_ins(folder: Path, dims: str = "[0, 1, 3, 2]") -> tuple[ModuleType, ModuleType]:
    """Two freshly imported pattern modules (a new process's, as far as their caches go), written into
    `folder` the first time with `dims` as the permutation's literal."""
    made = []
    for name in ("sdpa", "bilinear"):
        path = folder / f"{name}.py"
        if not path.exists():
            path.write_text(PATTERNS.format(dims=dims), encoding="utf-8")
        spec = importlib.util.spec_from_file_location(f"torchyard_stand_in_{name}", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        made.append(module)
    return made[0], made[1]


def printed(graphs: object) -> list[str]:
    return [str(graph.graph) for graph in graphs]  # type: ignore[attr-defined]


def test_patterns_are_made_once_then_loaded_as_they_were(tmp_path: Path) -> None:
    store = ArtifactCache(tmp_path / "cache")
    sdpa, bilinear = stand_ins(tmp_path)
    assert load_into(store, sdpa, bilinear) == "miss"
    assert sdpa.MADE == ["sdpa"] and bilinear.MADE == ["bilinear"]
    made_sdpa, made_bilinear = sdpa.get_graphs(), bilinear.get_graphs_dict()
    assert list((tmp_path / "cache").glob(f"*{SUFFIX}"))

    sdpa, bilinear = stand_ins(tmp_path)
    assert load_into(store, sdpa, bilinear) == "hit"
    assert sdpa.MADE == [] and bilinear.MADE == []  # loaded, not made
    assert printed(sdpa.get_graphs()) == printed(made_sdpa)
    assert printed(bilinear.get_graphs_dict()) == printed(made_bilinear)
    assert list(bilinear.get_graphs_dict().values()) == [True, False]
    assert printed(bilinear.get_graphs()) == printed(made_bilinear)
    assert sdpa.MADE == [] and bilinear.MADE == []
    for loaded, made in zip(sdpa.get_graphs(), made_sdpa, strict=True):
        targets = [node.target for node in loaded.graph.nodes if node.op == "call_function"]
        assert targets == [node.target for node in made.graph.nodes if node.op == "call_function"]
        assert SubgraphMatcher(loaded.graph, ignore_literals=True).match(made.graph)  # as the passes match


def test_a_corrupt_pattern_entry_is_made_again(tmp_path: Path) -> None:
    store = ArtifactCache(tmp_path / "cache")
    assert load_into(store, *stand_ins(tmp_path)) == "miss"
    (entry,) = (tmp_path / "cache").glob(f"*{SUFFIX}")
    entry.write_bytes(entry.read_bytes()[:-10] + b"0" * 10)
    sdpa, bilinear = stand_ins(tmp_path)
    assert load_into(store, sdpa, bilinear) == "rebuilt"
    assert sdpa.MADE == ["sdpa"]
    assert load_into(store, *stand_ins(tmp_path)) == "hit"


def test_a_pattern_the_encoding_cannot_write_exactly_is_not_stored(tmp_path: Path) -> None:
    """A literal the encoding does not know (here a slice) is not written as something else: nothing is stored."""
    store = ArtifactCache(tmp_path / "cache")
    sdpa, bilinear = stand_ins(tmp_path, dims="slice(0, 4)")
    own = sdpa.get_graphs
    assert load_into(store, sdpa, bilinear) == "live"
    assert not list(tmp_path.glob(f"cache/*{SUFFIX}"))
    assert sdpa.get_graphs is own and sdpa.MADE == ["sdpa"]  # made here, and kept by the module's own cache
    with pytest.raises(xnnpack_patterns.Unstorable, match="slice"):
        faithful(sdpa.get_graphs()[0])


@pytest.mark.parametrize(
    "target",
    [{"aten": ["aten", "no_such_op", "default"]}, {"python": ["os", "system"]}],
    ids=["an-op-this-torch-lacks", "a-module-the-encoding-does-not-name"],
)
def test_an_entry_that_does_not_decode_is_not_used(tmp_path: Path, target: dict[str, list[str]]) -> None:
    """An op this torch or ExecuTorch lacks, or a target from a module the encoding never writes (an entry
    imports nothing else): the modules keep their own functions."""
    store = ArtifactCache(tmp_path / "cache")
    sdpa, bilinear = stand_ins(tmp_path)
    planted = tmp_path / "planted.json"
    nodes = [["placeholder", "x", {"name": "x"}, {"tuple": []}, {"dict": []}],
             ["call_function", "y", target, {"tuple": [{"node": "x"}]}, {"dict": []}],
             ["output", "output", {"name": "output"}, {"tuple": [{"node": "y"}]}, {"dict": []}]]  # fmt: skip
    planted.write_text(json.dumps({"format": 2, "sdpa": [{"nodes": nodes, "print": ""}], "bilinear": []}))
    store.store(pattern_key(sdpa, bilinear), SUFFIX, planted, {})
    own = sdpa.get_graphs
    assert load_into(store, sdpa, bilinear) == "live"
    assert sdpa.get_graphs is own
    assert printed(sdpa.get_graphs()) and sdpa.MADE == ["sdpa"]


@pytest.mark.parametrize("where", ["placeholder-target", "node-name"])
def test_a_stored_name_with_code_in_it_never_runs(tmp_path: Path, where: str) -> None:
    """FX pastes placeholder targets and node names into the `forward` it generates and executes: a name
    such as `x=__import__(...)` would run when the graph module is made. The entry is not used, and the
    code does not run, even with its print recorded exactly (a forger can make that too)."""
    import operator

    marker = tmp_path / "ran"
    code = f"x=__import__('pathlib').Path({str(marker)!r}).touch()"
    graph = Graph()
    x = graph.create_node("placeholder", code if where == "placeholder-target" else "x", name="x")
    graph.output((graph.call_function(operator.neg, (x,)),))
    # FX keeps a placeholder's target as given; a name it would sanitize, so a forged entry writes it raw.
    name = code if where == "node-name" else "x"
    nodes = [
        ["placeholder", name, {"name": x.target}, {"tuple": []}, {"dict": []}],
        ["call_function", "neg", {"python": ["_operator", "neg"]}, {"tuple": [{"node": name}]}, {"dict": []}],
        ["output", "output", {"name": "output"}, {"tuple": [{"tuple": [{"node": "neg"}]}]}, {"dict": []}],
    ]
    stored = {"nodes": nodes, "print": str(graph)}
    with pytest.raises(ValueError, match="not a plain identifier"):
        decode(json.loads(json.dumps(stored)))
    store = ArtifactCache(tmp_path / "cache")
    sdpa, bilinear = stand_ins(tmp_path)
    planted = tmp_path / "planted.json"
    planted.write_text(json.dumps({"format": 2, "sdpa": [stored], "bilinear": []}))
    store.store(pattern_key(sdpa, bilinear), SUFFIX, planted, {})
    assert load_into(store, sdpa, bilinear) == "live"
    assert not marker.exists()


def test_a_changed_pattern_module_is_a_miss(tmp_path: Path) -> None:
    store = ArtifactCache(tmp_path / "cache")
    assert load_into(store, *stand_ins(tmp_path)) == "miss"
    for name in ("sdpa", "bilinear"):
        path = tmp_path / f"{name}.py"
        path.write_text(path.read_text().replace("0.125", "0.25"))
    sdpa, bilinear = stand_ins(tmp_path)
    assert load_into(store, sdpa, bilinear) == "miss"
    assert "0.25" in printed(sdpa.get_graphs())[0]


def test_concurrent_writers_of_the_patterns_leave_one_whole_entry(tmp_path: Path) -> None:
    store, start, states = ArtifactCache(tmp_path / "cache"), threading.Barrier(4), list[str]()
    modules = [stand_ins(tmp_path) for _ in range(4)]

    def prime(pair: tuple[ModuleType, ModuleType]) -> None:
        start.wait()
        states.append(load_into(store, *pair))

    threads = [threading.Thread(target=prime, args=(pair,)) for pair in modules]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(states) == 4 and set(states) <= {"miss", "hit"}
    assert len(list((tmp_path / "cache").glob(f"*{SUFFIX}"))) == 1
    assert not [path for path in (tmp_path / "cache").iterdir() if path.name.startswith(".")]  # no temp left
    assert load_into(store, *stand_ins(tmp_path)) == "hit"


def test_no_store_and_no_pattern_functions_leave_everything_as_it_is(tmp_path: Path) -> None:
    sdpa, bilinear = stand_ins(tmp_path)
    assert load_into(ArtifactCache(None), sdpa, bilinear) == "off"
    assert load_into(ArtifactCache(tmp_path / "cache"), sdpa, ModuleType("empty")) == "absent"
    assert sdpa.MADE == [] and not (tmp_path / "cache").exists()


def test_the_store_is_the_entry_cache_unless_the_artifact_cache_is_off(tmp_path: Path) -> None:
    root = str(tmp_path)
    assert store_for({contract.INDUCTOR_CACHE: root}).root == tmp_path / "artifacts"
    assert store_for({contract.INDUCTOR_CACHE: root, contract.ARTIFACT_CACHE: "off"}).root is None
    assert store_for({}).root is None


NO_EXECUTORCH = unavailable_reason("executorch-xnnpack", torch.device("cpu"))


def edge_patterns(workdir: Path) -> list[bool]:
    """In a child that imports ExecuTorch's compiler anyway: whether a graph of edge ops (ExecuTorch's own
    targets, `dim_order_ops` among them) decodes to the same targets, the same objects. (The entry's own
    cache is left alone, as by every self-test: the graphs ExecuTorch really makes are checked as they are
    stored, by the first XNNPACK lowering of a run that has none.)"""
    import operator

    from executorch.exir.dialects._ops import ops as exir_ops
    from torch.fx import Graph, GraphModule

    graph = Graph()
    x = graph.placeholder("x")
    scaled = graph.call_function(exir_ops.edge.aten.mul.Scalar, (x, 0.5))
    copied = graph.call_function(
        exir_ops.edge.dim_order_ops._to_dim_order_copy.default, (scaled,), {"dtype": torch.float16, "dim_order": [0, 1]}
    )
    parts = graph.call_function(exir_ops.edge.aten.split_with_sizes_copy.default, (copied, [1, 1]))
    graph.output((graph.call_function(operator.getitem, (parts, 1)),))
    original = GraphModule(torch.nn.Module(), graph)
    loaded = decode(json.loads(json.dumps(faithful(original))))
    pairs = zip(loaded.graph.nodes, original.graph.nodes, strict=True)
    return [mine.target is theirs.target for mine, theirs in pairs if theirs.op == "call_function"]


# Skipped, not started beside the run, where it cannot run.
@(pytest.mark.skip(reason=NO_EXECUTORCH) if NO_EXECUTORCH else pytest.mark.beside.with_args(edge_patterns))
def test_edge_ops_decode_to_executorchs_own(beside: list[bool]) -> None:
    assert beside and all(beside)
