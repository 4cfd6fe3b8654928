"""Every backend module answers the protocol, and its facts agree with what the suites and the host read."""

from __future__ import annotations

import importlib.util

import pytest
import torch

from torchyard.inimage.parity.backends import BACKENDS, Backend, aotinductor, executorch, export, unavailable_reason
from torchyard.inimage.verdicts import FROM_MEMORY
from torchyard.names import BACKEND_FACTS, TORCH_DEVICES, module_name

pytestmark = pytest.mark.harness

DEVICES = sorted(set(TORCH_DEVICES.values()))


def test_every_backend_is_listed_under_its_own_name() -> None:
    assert all(name == backend.NAME for name, backend in BACKENDS.items())  # and every name (test_harness.py)


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
