"""Every backend module answers the protocol, and its facts agree with what the suites and the host read."""

from __future__ import annotations

import importlib.util
import operator
from pathlib import Path

import pytest
import torch

from torchyard.inimage.evaluation.backends import BACKENDS, Backend, aotinductor, executorch, export, unavailable_reason
from torchyard.inimage.evaluation.localize import localizes
from torchyard.inimage.plugin.verdicts import FROM_MEMORY
from torchyard.inimage.selftests.planted import BY_NAME
from torchyard.inimage.start.probe import CPU
from torchyard.names import BACKEND_FACTS, BACKEND_NAMES, TORCH_DEVICES, module_name

pytestmark = pytest.mark.harness

DEVICES = sorted(set(TORCH_DEVICES.values()))


def test_every_backend_is_listed_under_its_own_name() -> None:
    assert all(name == backend.NAME for name, backend in BACKENDS.items())  # and every name (below)


@pytest.mark.parametrize(("name", "backend"), BACKENDS.items(), ids=list(BACKENDS))
def test_each_backend_keeps_the_file_its_suite_judges(name: str, backend: Backend) -> None:
    suite = BACKEND_FACTS[backend.NAME].suite
    if suite in ("export", "aot"):  # these suites pass only with the program saved and loaded back
        assert backend.ARTIFACT is not None and backend.ARTIFACT.loaded
    if suite == "runtime":  # a runtime runs a program from a file, or from memory while it keeps the file
        assert backend.ARTIFACT is not None
        assert (name in FROM_MEMORY) == (not backend.ARTIFACT.loaded)
    if backend.ARTIFACT is not None:
        assert backend.ARTIFACT.suffix.startswith(".") and len(backend.ARTIFACT.suffix) > 1


@pytest.mark.parametrize(("name", "backend"), BACKENDS.items(), ids=list(BACKENDS))
@pytest.mark.parametrize("device", DEVICES)
def test_each_backend_says_where_it_cannot_run_and_why(name: str, backend: Backend, device: str) -> None:
    reason = backend.unavailable(torch.device(device))
    assert reason is None or reason.strip(), name
    assert unavailable_reason(name, torch.device(device)) == reason
    if reason is None:  # where it runs, what versions it is installed
        missing = [dist for dist in BACKEND_FACTS[backend.NAME].distributions if not _installed(dist)]
        assert not missing, f"{name} runs on {device} without {missing}"


@pytest.mark.parametrize(("name", "backend"), BACKENDS.items(), ids=list(BACKENDS))
def test_each_backend_says_whether_it_exports_and_what_it_imports_first(name: str, backend: Backend) -> None:
    # A program kept in a file is torch.export's, lowered further (inductor's and eager's keep none).
    assert (backend.ARTIFACT is not None) == backend.EXPORTS, name
    assert all(isinstance(module, str) and module for module in backend.FIRST_USE), name
    if backend.FIRST_USE and backend.unavailable(torch.device("cpu")) is None:  # what it names is importable here
        modules = [step.partition(":")[0] for step in backend.FIRST_USE]
        assert all(importlib.util.find_spec(module) is not None for module in modules), name
    # Localized node by node only through a program torch.export made; a lowered one needs its runtime's taps.
    assert backend.LOCALIZES in (None, "compiler steps") or backend.EXPORTS, name
    assert (backend.LOCALIZES == "lowered nodes") == isinstance(backend, executorch.ExecuTorch), name
    assert localizes(name) == (backend.LOCALIZES is not None), name


def _installed(distribution: str) -> bool:
    return importlib.util.find_spec(module_name(distribution)) is not None


def test_a_name_that_is_no_backend_is_never_unavailable() -> None:
    assert unavailable_reason("inductor:max-autotune", torch.device("cpu")) is None
    assert unavailable_reason("train-eager-sgd", torch.device("cpu")) is None


def test_executorchs_delegates_are_data() -> None:
    delegates = {delegate.backend: delegate for delegate in (executorch.PORTABLE, executorch.XNNPACK)}
    for name, delegate in delegates.items():
        backend = BACKENDS[name]
        assert isinstance(backend, executorch.ExecuTorch) and backend.delegate is delegate
    assert executorch.PORTABLE.devices == frozenset(DEVICES)  # the .pte runs on the CPU whatever the entry's device
    assert executorch.XNNPACK.devices == frozenset({"cpu"})
    assert executorch.XNNPACK.options() == {"partitioners": ["XnnpackPartitioner"]}
    assert executorch.PORTABLE.options() == {"partitioners": []}
    if importlib.util.find_spec("executorch") is None:
        assert (
            unavailable_reason("executorch-xnnpack", torch.device("cpu")) == "executorch is not installed in this image"
        )
        return
    assert unavailable_reason("executorch-xnnpack", torch.device("cuda")) == (
        "XNNPACK is a CPU backend; this entry targets cuda"
    )


def test_aotinductor_runs_where_it_generates_code_and_keeps_a_package_of_its_own() -> None:
    assert aotinductor.unavailable(torch.device("cpu")) is None
    assert aotinductor.unavailable(torch.device("cuda")) is None
    assert aotinductor.unavailable(torch.device("mps")) == (
        "AOTInductor compiles for CPU and CUDA devices; this entry targets mps"
    )
    # torch's packager refuses a path that does not end in .pt2; export's .pt2 of the same case is another file.
    assert aotinductor.ARTIFACT.suffix.endswith(".pt2") and aotinductor.ARTIFACT.suffix != export.ARTIFACT.suffix


def _partitioned() -> torch.fx.GraphModule:
    """A module shaped as Torch-TensorRT's partition leaves it (its own code names the children): an engine, the
    operators it left to PyTorch in a graph of their own, a second engine. Built here: no TensorRT on a CPU."""
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    summed = graph.call_function(torch.ops.aten.cumsum.default, (x, 0))
    graph.output(graph.call_function(torch.ops.aten.sort.default, (summed,)))
    fallback = torch.fx.GraphModule(torch.nn.Module(), graph)
    root = torch.nn.Module()
    root.add_module("_run_on_acc_0", torch.nn.Identity())
    root.add_module("_run_on_gpu_1", fallback)
    root.add_module("_run_on_acc_2", torch.nn.Identity())
    top = torch.fx.Graph()
    value = top.placeholder("x")
    for name in ("_run_on_acc_0", "_run_on_gpu_1", "_run_on_acc_2"):
        value = top.call_module(name, (value,))
    top.output(value)
    return torch.fx.GraphModule(root, top)


def execute_engine(*inputs: object) -> object:  # a loaded program's engine call, as Torch-TensorRT inlines it
    return inputs


def test_torch_tensorrts_engines_and_what_it_left_to_pytorch_are_counted_from_its_partition() -> None:
    """Issue 60: Torch-TensorRT's engines built and nodes left to PyTorch, in the compiled module and in a
    loaded one. This runs the accounting only: Torch-TensorRT itself needs an NVIDIA GPU."""
    from torchyard.inimage.evaluation.backends import tensorrt

    assert tensorrt.engines(_partitioned()) == {
        "subgraphs": 2, "non-delegated-nodes": 2, "left-to": "PyTorch",
        "left-out": ["aten.cumsum.default", "aten.sort.default"],
    }  # fmt: skip
    loaded = torch.fx.Graph()
    x = loaded.placeholder("x")
    engine = loaded.call_function(execute_engine, (x,))
    first = loaded.call_function(operator.getitem, (engine, 0))
    loaded.output(loaded.call_function(torch.ops.aten.cumsum.default, (first, 0)))
    assert tensorrt.engines(torch.fx.GraphModule(torch.nn.Module(), loaded)) == {
        "subgraphs": 1, "non-delegated-nodes": 1, "left-to": "PyTorch", "left-out": ["aten.cumsum.default"],
    }  # fmt: skip
    assert tensorrt.engines(object()) is None  # neither shape: no accounting, and no failure


def test_every_backend_name_has_a_runner() -> None:
    assert tuple(BACKENDS) == BACKEND_NAMES


def pte_loaded_both_ways(workdir: Path) -> list[list[float]]:
    """The MLP lowered to a .pte, run as `load_pte` loads it (the extension where this release has it as
    torchyard calls it, else `executorch.runtime`), as loaded by `executorch.runtime`, and in eager PyTorch."""
    from executorch.exir import to_edge_transform_and_lower

    case = BY_NAME["mlp"]
    module, (call, *_) = case.module(), case.calls()
    path = workdir / "mlp.pte"
    path.write_bytes(to_edge_transform_and_lower(torch.export.export(module, call.args)).to_executorch().buffer)
    with torch.no_grad():
        eager = module(*call.args)
    runs = [load(path)(list(call.args))[0] for load in (executorch.load_pte, executorch.load_pte_by_runtime)]
    return [output.flatten().tolist() for output in (*runs, eager)]


NO_EXECUTORCH = unavailable_reason("executorch-portable", CPU)


# Skipped, not started beside the run, where it cannot run.
@(pytest.mark.skip(reason=NO_EXECUTORCH) if NO_EXECUTORCH else pytest.mark.beside.with_args(pte_loaded_both_ways))
def test_a_pte_runs_alike_from_the_extension_and_from_executorch_runtime(beside: list[list[float]]) -> None:
    """Warm runs load a .pte from ExecuTorch's extension directly (its public wrapper imports the whole
    compiler), or through the wrapper where a release lays the extension out otherwise (executorch 1.2 has
    no `executorch.extension.pybindings._C`); either way the program runs to the wrapper's values."""
    by_extension, by_runtime, eager = beside
    assert by_extension == by_runtime
    assert torch.allclose(torch.tensor(by_extension), torch.tensor(eager), rtol=1e-4, atol=1e-5)
