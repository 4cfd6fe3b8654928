"""The cyclic collector is kept off what lives all run (`freezer.Freezer`), and still frees young cycles."""

from __future__ import annotations

import gc
import sys
import weakref
from types import ModuleType

import pytest

from torchyard.inimage.plugin.first_use import Freezer

pytestmark = pytest.mark.harness


class _Cycle:
    def __init__(self) -> None:
        self.me = self


def test_the_collector_freezes_after_imports_and_frees_young_cycles_first(monkeypatch: pytest.MonkeyPatch) -> None:
    assert gc.isenabled()  # the entry point starts with it off: it must be on once tests run
    freezes: list[int] = []  # counted, not read from gc.get_freeze_count: that walks every frozen object
    freeze = gc.freeze

    def counted() -> None:
        freezes.append(1)
        freeze()

    monkeypatch.setattr(gc, "freeze", counted)
    freezer = Freezer()
    freezer.freeze()
    freezer.after_test()  # no test imported anything: nothing more is frozen
    assert len(freezes) == 1
    garbage = _Cycle()
    gone = weakref.ref(garbage)
    del garbage  # a reference cycle: only the cyclic collector frees it
    for index in range(Freezer.NEW_MODULES):  # as if a test had imported a library
        monkeypatch.setitem(sys.modules, f"torchyard_planted_module_{index}", ModuleType("planted"))
    freezer.after_test()
    assert len(freezes) == 2
    assert gone() is None  # freed before the freeze, not kept for the rest of the run
