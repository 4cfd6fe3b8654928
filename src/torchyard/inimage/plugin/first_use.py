"""What lives all run, imported and frozen before the first test: the collector kept out of the way of the
run's own objects (`Freezer`), each selected backend's first-use imports done while it is still off, and
pytest's log handlers kept off torch's structured trace (a record for every compile event otherwise)."""

from __future__ import annotations

import gc
import logging
import sys
from pathlib import Path

import pytest

from torchyard.inimage.cases import base_backend
from torchyard.inimage.evaluation.backends import inductor
from torchyard.inimage.evaluation.backends.running import first_use
from torchyard.inimage.evaluation.cache.inductor_keys import remember as remember_inductor_keys
from torchyard.inimage.plugin.collection import param


class Freezer:
    """The in-image entry point starts with the collector off (`__main__`): importing torch, pytest and the
    plugins makes millions of objects that live all run. The first freeze, once the tests are collected,
    keeps them without collecting (what the imports left in cycles stays too) and turns the collector on (an
    xdist controller, which collects nothing, turns it on as its test loop starts). After a test that imported
    libraries (torch.export, ExecuTorch and dynamo load inside the first test that needs them), the young
    generations are collected and what is alive is frozen again: an older cycle it left stays to the end."""

    NEW_MODULES = 50  # imports that make a test "one that imported libraries"

    def __init__(self) -> None:
        self.modules = 0

    def freeze(self, *, collect: bool = True) -> None:
        if collect:
            gc.collect(1)
        gc.freeze()
        self.modules = len(sys.modules)
        gc.enable()

    def after_test(self) -> None:
        if len(sys.modules) >= self.modules + self.NEW_MODULES:
            self.freeze()


FIRST_USE = {"inductor": inductor.FIRST_USE}

# The parameters that name a test's backend: the plugin's own, and the runtime suite's and self-tests'.
BACKEND_PARAMS = ("compile_backend", "parity_backend", "train_backend", "backend")


def selected_backends(items: list[pytest.Item]) -> set[str]:
    """The backends (`inductor:<mode>` as inductor) the given tests run."""
    found = set()
    for item in items:
        for name in BACKEND_PARAMS:
            backend = param(item, name)
            if isinstance(backend, str):  # a compiled training step imports what inductor does
                found.add("inductor" if backend.startswith("train-inductor") else base_backend(backend))
    return found


def import_first_use(items: list[pytest.Item], cache: Path) -> None:
    """The selected backends' first-use imports; for inductor, its cache keys from the entry's cache
    (`inductor_keys`), which it would otherwise compute in every process."""
    backends = selected_backends(items)
    for backend in sorted(backends & FIRST_USE.keys()):
        first_use(FIRST_USE[backend])
    if "inductor" in backends:
        remember_inductor_keys(cache)


TORCH_TRACE = "torch.__trace"  # torch's structured trace (TORCH_TRACE=<dir> writes it), never propagated


def detach_pytest_from_torch_trace() -> None:
    """pytest (9.1) attaches its log handlers to every logger that does not propagate, torch's structured
    trace among them: torch then builds a trace record for every compile event (it builds none while that
    logger has no handler), and pytest shows each as an empty `DEBUG torch.__trace` line. Its handlers are
    detached there once pytest has attached them, for each phase of each test (its own removal is then a
    no-op); torch's own handler stays."""
    trace = logging.getLogger(TORCH_TRACE)
    for handler in [handler for handler in trace.handlers if type(handler).__module__.startswith("_pytest.")]:
        trace.removeHandler(handler)
