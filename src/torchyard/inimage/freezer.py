"""What lives all run, kept out of the cyclic collector's sight (`gc.freeze`), so that its full collections
walk only what the tests make."""

from __future__ import annotations

import gc
import sys


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
