"""Parity cases: a model, its inputs, and how its outputs are compared.

Users add their own without editing torchyard: a module named in matrix.toml (`cases = ["pkg.mod"]`) or
registered under the `torchyard.cases` entry point group, exposing `CASES: list[Case]`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import Any, Literal

import torch

Inputs = tuple[Any, ...]


@dataclass(frozen=True)
class Case:
    """One model in the corpus.

    `make_inputs` builds one input set from a seeded generator; `dynamic_shapes` (for torch.export) with
    `extra_batch` runs the program again at another batch size. `compare="statistics"` is for programs
    whose values cannot match (random noise): shape, dtype and moments are checked instead.
    `known_failures` maps a backend to the upstream bug it hits: the test is a strict xfail, so a fix
    upstream shows up as a failure to remove the entry.
    """

    name: str
    make_module: Callable[[], torch.nn.Module]
    make_inputs: Callable[[torch.Generator], Inputs]
    dynamic_shapes: Callable[[], Any] | None = None
    extra_batch: Callable[[torch.Generator], Inputs] | None = None
    compare: Literal["values", "statistics"] = "values"
    known_failures: Mapping[str, str] = field(default_factory=dict)
    description: str = ""

    def input_sets(self, seed: int = 0) -> list[Inputs]:
        generator = torch.Generator().manual_seed(seed)
        sets = [self.make_inputs(generator)]
        if self.extra_batch is not None:
            sets.append(self.extra_batch(generator))
        return sets

    def module(self, seed: int = 0) -> torch.nn.Module:
        """The model with deterministic weights, in eval mode."""
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            return self.make_module().eval()


class CaseLoadError(Exception):
    """A user case module could not be loaded or does not expose `CASES`."""


def _cases_of(module_name: str) -> list[Case]:
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise CaseLoadError(f"cases module {module_name!r} cannot be imported: {error}") from None
    cases = getattr(module, "CASES", None)
    if not isinstance(cases, list | tuple) or not all(isinstance(case, Case) for case in cases):
        raise CaseLoadError(f"cases module {module_name!r} must define CASES, a list of torchyard Case objects")
    return list(cases)


def load_cases(modules: Sequence[str] = (), *, use_entry_points: bool = True) -> list[Case]:
    """The built-in corpus, then each named module's cases, then those registered as entry points."""
    from torchyard.inimage.cases.builtin import CASES

    names: list[str] = list(modules)
    if use_entry_points:
        names += [point.value for point in entry_points(group="torchyard.cases")]
    cases = list(CASES)
    for module_name in dict.fromkeys(names):
        cases += _cases_of(module_name)
    seen: set[str] = set()
    for case in cases:
        if case.name in seen:
            raise CaseLoadError(f"two cases are named {case.name!r}; case names must be unique")
        seen.add(case.name)
    return cases


def case_names(cases: Iterable[Case]) -> list[str]:
    return [case.name for case in cases]
