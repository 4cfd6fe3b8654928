"""Parity cases: a model, its inputs, how its outputs are compared, and what is known to fail.

Users add their own without editing torchyard: a module named in matrix.toml (`cases = ["pkg.mod"]`, or
`"pkg.mod:ATTR"` for another attribute than `CASES`) or registered under the `torchyard.cases` entry point
group (`name = "pkg.mod"` or `"pkg.mod:ATTR"`), exposing a list of `Case`. Import it as
`from torchyard.cases import Case`.
"""

from __future__ import annotations

import copy
import importlib
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import Any, Literal

import torch

from torchyard.inimage.cases.files import InputFiles
from torchyard.names import BACKEND_NAMES, PRECISION_DTYPES, TRAIN_BACKENDS

Inputs = tuple[Any, ...]
TOLERANCE_FIELDS = ("max-scaled-error", "max-rel-l2", "min-cosine")


@dataclass(frozen=True)
class Call:
    """One call of the model: positional and keyword inputs, each any pytree of tensors and scalars."""

    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class KnownFailure:
    """An upstream bug a backend hits on a case, stated exactly enough that any other outcome fails.

    Either an error: the exception type it raises (`raises`, by name, matched against the exception's
    class and its bases) and a regular expression searched for in its message (`match`, as
    `pytest.raises(match=...)` takes it: `re.escape` text that holds `(`, `[`, `.` or `*` to match it
    literally). Or wrong values: `computes`, a model factory (seeded as the case's is, so the same weights)
    whose eager outputs the backend gives instead of the case's; the parity suite then expects the backend
    to miss the case's reference and to meet that model's, within the same bounds. Suites that do not
    compare values see no failure there. Any other outcome on that backend is a real failure, and a backend
    that starts working fails until this is removed. A known wrong value may name the `node` where the
    backend first diverges (as localization names it, `gelu`): then the failure is known only there.
    """

    reason: str
    raises: str = ""
    match: str = ""
    computes: Callable[[], torch.nn.Module] | None = None
    node: str = ""

    def __post_init__(self) -> None:
        if self.node and self.computes is None:
            raise ValueError(f"known failure {self.reason!r}: node names where a wrong value diverges (with computes)")
        if (self.computes is not None) == bool(self.raises or self.match):
            raise ValueError(
                f"known failure {self.reason!r}: give the error (raises and match) or what the backend "
                "computes instead (computes), one of the two"
            )
        if self.computes is None and not (self.raises and self.match):
            raise ValueError(f"known failure {self.reason!r}: an error needs both raises and match")
        try:
            re.compile(self.match)
        except re.error as error:
            raise ValueError(
                f"known failure {self.reason!r}: match {self.match!r} is not a regular expression ({error}); "
                f"to match it as literal text, write match=re.escape({self.match!r})"
            ) from None

    def matches(self, error_types: Sequence[str], message: str) -> bool:
        return self.raises in error_types and re.search(self.match, message) is not None

    def mismatch(self, error_types: Sequence[str], message: str) -> str:
        """Why an error is not this known failure, in words ("" when it is, or when this is a known wrong value,
        which names no error): the type it raised, and whether its message holds `match` as literal text that
        the regular expression does not match."""
        if self.computes is not None:
            return ""
        why = []
        if error_types and self.raises not in error_types:
            why.append(f"it raised {error_types[0]}, not {self.raises}")
        if re.search(self.match, message) is None:
            if self.match in message:
                why.append(
                    f"its message holds {self.match!r} as literal text, but match is a regular expression "
                    f"(as in pytest.raises) that does not match it there: write match=re.escape({self.match!r})"
                )
            else:
                why.append(f"its message does not match {self.match!r}")
        return "; ".join(why)

    def expectation(self) -> str:
        if self.computes is not None:
            at = f", diverging first at node {self.node}" if self.node else ""
            return f"the known wrong values (what {getattr(self.computes, '__qualname__', 'computes')} computes{at})"
        return f"the known failure {self.raises} matching {self.match!r}"


def base_backend(backend: str) -> str:
    """`inductor:reduce-overhead` -> `inductor`: a compile mode is a column of the inductor backend."""
    return backend.split(":", 1)[0]


@dataclass(frozen=True)
class Case:
    """One model in the corpus.

    `make_module` is called with no arguments (a class, or a `functools.partial` or lambda that passes the
    model's own), under a fixed seed, and the model is put in eval mode for every suite but train, which
    calls `.train()` for its step. `make_inputs` builds one call from a seeded generator: a tuple of
    positional inputs, or a `Call` with keyword inputs too; inputs and outputs may be any nesting of dicts,
    lists, tuples, named tuples and dataclasses of tensors and Python scalars. `dynamic_shapes` (for
    torch.export) with `extra_batch` runs the program again at another batch size. `compare="statistics"`
    is for programs whose values cannot match (random noise): shape, dtype and moments are compared with
    eager's.
    `tolerances` overrides the bounds for this case (`{"float32.inductor": {"max-rel-l2": 1e-4}}`, or
    `"float32.*"`); `backends` limits the backends it applies to (the others skip, saying so).
    `input_files` (`InputFiles`) adds the batches the model really sees, from files in the project, after
    the random ones (or alone, without `make_inputs`); a failing result names the batch.
    The train suite takes one optimizer step with it unless `train=False`; its loss is the mean square of
    the floating output leaves unless `loss(outputs, call)` says otherwise; `scaler` sets fp16's
    `torch.amp.GradScaler` (`init_scale`, `growth_interval`, `growth_factor`, `backoff_factor`).
    `cache=False` lowers and evaluates it afresh every run: no artifact, no kept result (a note in the report says so).
    torch.compile runs as users run it, graph breaks allowed (counted, with their reasons, in the report);
    `fullgraph=True` holds it to one graph, as export-like deployment needs: a graph break fails the result.
    """

    name: str
    make_module: Callable[[], torch.nn.Module]
    make_inputs: Callable[[torch.Generator], Inputs | Call] | None = None
    dynamic_shapes: Callable[[], Any] | None = None
    extra_batch: Callable[[torch.Generator], Inputs | Call] | None = None
    compare: Literal["values", "statistics"] = "values"
    known_failures: Mapping[str, KnownFailure] = field(default_factory=dict)
    description: str = ""
    tolerances: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    backends: tuple[str, ...] | None = None
    train: bool = True
    loss: Callable[[Any, Call], torch.Tensor] | None = None
    scaler: Mapping[str, float] = field(default_factory=dict)
    input_files: InputFiles | None = None
    cache: bool = True
    fullgraph: bool = False

    def __post_init__(self) -> None:
        if self.make_inputs is None and self.input_files is None:
            raise ValueError(f"case {self.name!r}: needs make_inputs, input_files, or both")
        if self.input_files is not None and not isinstance(self.input_files, InputFiles):
            raise ValueError(f"case {self.name!r}: input_files must be a torchyard.cases.InputFiles")
        known_backends = (*BACKEND_NAMES, *TRAIN_BACKENDS)
        for backend in [*self.known_failures, *(self.backends or ())]:
            if base_backend(backend) not in known_backends:
                raise ValueError(
                    f"case {self.name!r}: unknown backend {backend!r} (one of {', '.join(known_backends)})"
                )
        unknown_scaler = set(self.scaler) - {"init_scale", "growth_interval", "growth_factor", "backoff_factor"}
        if unknown_scaler:
            raise ValueError(f"case {self.name!r}: scaler: unknown settings {sorted(unknown_scaler)}")
        for backend, known in self.known_failures.items():
            if not isinstance(known, KnownFailure):
                raise ValueError(
                    f"case {self.name!r}: known_failures[{backend!r}] must be a KnownFailure(reason, raises, match)"
                    " or a KnownFailure(reason, computes=...)"
                )
        for key, bounds in self.tolerances.items():
            dtype, _, backend = key.partition(".")
            if dtype not in PRECISION_DTYPES.values() or (
                backend != "*" and base_backend(backend) not in known_backends
            ):
                raise ValueError(f"case {self.name!r}: tolerance key {key!r} is not '<dtype>.<backend>' or '<dtype>.*'")
            unknown = set(bounds) - set(TOLERANCE_FIELDS)
            if unknown:
                raise ValueError(f"case {self.name!r}: tolerance {key!r}: unknown fields {sorted(unknown)}")

    def known_failure(self, backend: str) -> KnownFailure | None:
        """What is known to fail on `backend` (`inductor:<mode>` falls back to inductor's)."""
        return self.known_failures.get(backend) or self.known_failures.get(base_backend(backend))

    def applies_to(self, backend: str) -> bool:
        return self.backends is None or backend in self.backends or base_backend(backend) in self.backends

    def calls(self, seed: int = 0) -> list[Call]:
        """The random batches (`make_inputs`, then `extra_batch`), then each input file's."""
        generator = torch.Generator().manual_seed(seed)
        makers = [self.make_inputs] if self.make_inputs is not None else []
        makers += [self.extra_batch] if self.extra_batch is not None else []
        made: list[Any] = [maker(generator) for maker in makers]
        if self.input_files is not None:
            made += [Call(kwargs=batch) if isinstance(batch, dict) else batch for batch in self.input_files.batches()]
        return [value if isinstance(value, Call) else Call(tuple(value)) for value in made]

    def batch_labels(self) -> list[str]:
        """What names each of `calls()` where a result says which batch failed: "" for every batch of a case
        without input files (its reasons stay as they were)."""
        random = [*(["random inputs"] if self.make_inputs else []), *(["extra batch"] if self.extra_batch else [])]
        if self.input_files is None:
            return [""] * len(random)
        return [*random, *self.input_files.labels]

    def module(self, seed: int = 0) -> torch.nn.Module:
        """The model with deterministic weights, in eval mode."""
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            return self.make_module().eval()

    def fresh_module(self, seed: int = 0) -> torch.nn.Module:
        """A model no other evaluation holds: `.to()` changes a module in place, so one that a factory hands out
        twice would carry one evaluation's dtype into the next. Copied; where it cannot be (a model that keeps a
        `staticmethod` object on itself), used as built if the factory builds a new one each call."""
        module = self.module(seed)
        try:
            return copy.deepcopy(module)
        except Exception as error:
            if not _shares_tensors(module, self.module(seed)):
                return module
            raise TypeError(
                f"the case's factory returns the same model each call, or one holding the same weights, and it "
                f"cannot be copied (copy.deepcopy: {type(error).__name__}: {error}): make the factory build a new "
                "model"
            ) from None


def _shares_tensors(one: torch.nn.Module, other: torch.nn.Module) -> bool:
    """Whether two models are one, or hold a weight or buffer in the same memory (`nn.Sequential(shared)`)."""
    if one is other:
        return True
    memory = {_storage(t) for t in [*one.parameters(), *one.buffers()] if t.numel()}
    return any(_storage(t) in memory for t in [*other.parameters(), *other.buffers()] if t.numel())


def _storage(tensor: torch.Tensor) -> int:
    """Where a tensor's values live: its data pointer, a sparse or other layout's values' (a CSR tensor has none
    of its own to ask)."""
    if tensor.layout == torch.strided:
        return int(tensor.data_ptr())
    if tensor.layout == torch.sparse_coo:
        return int(tensor._values().data_ptr())
    if tensor.layout in (torch.sparse_csr, torch.sparse_bsr):
        return int(tensor.values().data_ptr())
    return id(tensor)


class CaseLoadError(Exception):
    """A user case module could not be loaded or does not expose its cases."""


def _cases_of(reference: str) -> list[Case]:
    module_name, _, attribute = reference.partition(":")
    try:
        module = importlib.import_module(module_name)
    except Exception as error:
        raise CaseLoadError(
            f"cases module {module_name!r} cannot be imported: {type(error).__name__}: {error}"
        ) from None
    cases = getattr(module, attribute or "CASES", None)
    if not isinstance(cases, list | tuple) or not all(isinstance(case, Case) for case in cases):
        raise CaseLoadError(
            f"cases module {module_name!r} must define {attribute or 'CASES'}, a list of torchyard Case objects"
        )
    return list(cases)


def load_cases(modules: Sequence[str] = (), *, use_entry_points: bool = True, builtin: bool = True) -> list[Case]:
    """The built-in corpus (unless left out), then each named module's cases, then entry points'."""
    from torchyard.inimage.cases.builtin import CASES

    names: list[str] = list(modules)
    if use_entry_points:
        names += [point.value for point in entry_points(group="torchyard.cases")]
    cases = list(CASES) if builtin else []
    for reference in dict.fromkeys(names):
        cases += _cases_of(reference)
    seen: set[str] = set()
    for case in cases:
        if case.name in seen:
            raise CaseLoadError(f"two cases are named {case.name!r}; case names must be unique")
        seen.add(case.name)
    return cases
