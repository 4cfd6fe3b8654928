"""What a backend imports the first time it runs, imported once the tests are collected, while the collector
is still off, and frozen with the rest (`freezer`): inside the first test, the collector walked the growing
heap several times over. Only for backends a selected test runs: nothing is imported that the run would not
have imported anyway."""

from __future__ import annotations

from pathlib import Path

import pytest

from torchyard.inimage.cases import base_backend
from torchyard.inimage.collection import param
from torchyard.inimage.parity.backends import inductor
from torchyard.inimage.parity.backends.running import first_use
from torchyard.inimage.parity.inductor_keys import remember as remember_inductor_keys

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
