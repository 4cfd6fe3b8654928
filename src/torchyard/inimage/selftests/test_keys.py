"""The artifact cache keys models as real ones are written: a dataclass config, a named tuple made by
`collections.namedtuple`, a `functools.partial`, code from a released package (made by exec, as einx's is),
a sparse buffer, a native handle that answers every name each count by what decides them; a change to any of
them changes the key; what still cannot be keyed says why, and an error of the key code's own is torchyard's:
the case runs uncached."""

from __future__ import annotations

import collections
import dataclasses
import functools
import importlib
import importlib.metadata
import linecache
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import sympy  # type: ignore[import-untyped]
import torch

from torchyard import contract
from torchyard.inimage.cases import Case
from torchyard.inimage.evaluation.backends.running import lowering_key
from torchyard.inimage.evaluation.cache import keys
from torchyard.inimage.evaluation.cache.keys import Unkeyable, code_digest, device_identity, released, why_unkeyable
from torchyard.names import DEVICE_FACTS

pytestmark = pytest.mark.harness

Heads = collections.namedtuple("Heads", ["mean", "scale"])  # no class statement: no source to read


@dataclasses.dataclass
class Config:
    width: int = 4
    temperature: float = 1.0


TANH_GELU = functools.partial(torch.nn.functional.gelu, approximate="tanh")


class Policy(torch.nn.Module):
    def __init__(self, config: Config | None = None, act: Any = TANH_GELU) -> None:
        super().__init__()
        self.config = config or Config()
        self.act = act
        self.linear = torch.nn.Linear(self.config.width, self.config.width)

    def forward(self, x: torch.Tensor) -> Heads:
        y = self.act(self.linear(x)) / self.config.temperature
        return Heads(y, y.exp())


def test_a_dataclass_config_a_named_tuple_and_a_partial_are_keyed() -> None:
    """Each made the case unkeyable before (`no source for '__create_fn__.<locals>.__repr__'`, the named
    tuple's class), so its lowerings were never cached."""
    assert why_unkeyable(Policy()) == ""


def test_what_a_module_holds_decides_its_key() -> None:
    base = code_digest(Policy())
    assert code_digest(Policy()) == base
    assert code_digest(Policy(Config(temperature=2.0))) != base  # a config's value
    assert code_digest(Policy(act=functools.partial(torch.nn.functional.gelu, approximate="none"))) != base
    assert code_digest(Policy(act=torch.nn.functional.relu)) != base
    hooked = Policy()
    hooked.register_forward_hook(lambda module, inputs, output: output)
    assert code_digest(hooked) != base  # a hook changes what the module computes


class Ensemble(torch.nn.Module):
    """Holds its members in a plain list, out of its tree of submodules (and of its state dict)."""

    def __init__(self, scale: float) -> None:
        super().__init__()
        member = torch.nn.Linear(4, 4)
        with torch.no_grad():
            member.weight.fill_(scale)
            member.bias.zero_()
        self.members = [member]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.stack([member(x) for member in self.members]).sum(0)


def test_weights_held_outside_the_tree_of_submodules_are_keyed() -> None:
    assert code_digest(Ensemble(1.0)) == code_digest(Ensemble(1.0)) != code_digest(Ensemble(2.0))


def key(module: torch.nn.Module) -> str:
    return keys.artifact_key(
        case_name="policy", backend="export", options={}, module=module, inputs=((torch.zeros(2, 4),), {}),
        dynamic_shapes=None, device=torch.device("cpu"), dtype=torch.float32,
    )  # fmt: skip


def test_a_buffer_left_out_of_the_state_dict_is_keyed_as_a_weight() -> None:
    """A causal mask is often registered with `persistent=False`: out of the state dict, not out of the key."""
    masks = []
    for value in (1.0, 0.0):
        torch.manual_seed(0)
        masks.append(Policy())
        masks[-1].register_buffer("mask", torch.full((4,), value), persistent=False)
    assert key(masks[0]) != key(masks[1])


class Simplifier(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.simplify = functools.partial(sympy.simplify, rational=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x


def test_code_from_a_released_distribution_counts_by_its_version(monkeypatch: pytest.MonkeyPatch) -> None:
    """sympy stands in for einx: installed from an index, its code counts by its version, so a function of
    it that has no source (einx makes its functions by exec) keys all the same; this file's code, from a
    path, counts by its source."""
    assert released(sympy.simplify.__module__) == f"sympy=={importlib.metadata.version('sympy')}"
    assert released(__name__) is None
    read = keys._source

    def without_sympys(obj: Any) -> str:
        if str(getattr(obj, "__module__", "")).startswith("sympy"):
            raise Unkeyable(f"no source for {obj!r}")
        return read(obj)

    monkeypatch.setattr(keys, "_source", without_sympys)
    assert why_unkeyable(Simplifier()) == ""


def test_code_made_at_run_time_says_why_it_cannot_be_keyed() -> None:
    namespace: dict[str, Any] = {"__name__": __name__}
    exec("def doubled(x):\n    return x * 2\n", namespace)  # as a notebook or a code generator makes one
    assert why_unkeyable(Policy(act=namespace["doubled"])).startswith(
        f"no source for 'doubled' in {__name__} (code made at run time"
    )
    bare: dict[str, Any] = {}
    exec("def tripled(x):\n    return x * 3\n", bare)  # no module at all: its code is still needed
    assert why_unkeyable(Policy(act=bare["tripled"])).startswith("no source for 'tripled'")


SET_MADE = """
import torch
from torchyard.inimage.evaluation.cache.keys import code_digest

NAMES = {"number", "keyword", "builtin", "punctuation", "comment", "string", "constant", "identifier"}


class Styled(torch.nn.Module):
    # As loguru's logger, which x-transformers' code names: a table made by iterating a set of strings.
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(2, 2)
        self.style = {name: len(name) for name in NAMES}

    def forward(self, x):
        return self.linear(x)


print(code_digest(Styled()))
"""


def test_a_model_whose_state_is_made_from_a_set_keys_alike_in_every_run_under_the_runs_hash_seed(
    tmp_path: Path,
) -> None:
    """A set's order follows Python's hash seed, random per process unless fixed: the run fixes it
    (`contract.HASH_SEED`), as the host starts every run, so such a model is keyed alike each run."""
    (tmp_path / "set_made.py").write_text(SET_MADE)
    fixed = contract.HASH_SEED["PYTHONHASHSEED"]
    seeds = ("1", "2", fixed, fixed)  # eight names: two seeds order them alike once in 40,320
    path = os.pathsep.join([str(tmp_path), *sys.path])
    # Side by side: each interpreter imports torch, and the run waits for the slowest only.
    started = [
        subprocess.Popen(
            [sys.executable, "-c", "import set_made"], env={**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": path},
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        for seed in seeds
    ]  # fmt: skip
    digests = []
    for process in started:
        out, err = process.communicate()
        assert process.returncode == 0, err
        digests.append(out.strip())
    assert digests[0] != digests[1]  # the premise: the seed changes the key
    assert digests[2] == digests[3]


class Lookup(torch.nn.Module):
    """A model that keeps a table its forward never reads, in a layout `.contiguous()` refuses (`unsupported
    memory format option Contiguous`), as a speech model's sparse alignment buffer was."""

    def __init__(self, table: torch.Tensor) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)
        self.register_buffer("table", table)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.linear(x)
        return out


def test_a_buffer_in_any_layout_is_keyed_by_its_values() -> None:
    """Each failed the key with a RuntimeError before, which the report showed as the case's failure."""
    eye = torch.eye(4)
    tables: dict[str, Callable[[float], torch.Tensor]] = {
        "sparse": lambda scale: (eye * scale).to_sparse(),
        "sparse_csr": lambda scale: (eye * scale).to_sparse_csr(),
        "sparse_bsc": lambda scale: (eye * scale).to_sparse_bsc((2, 2)),
        "mkldnn": lambda scale: (eye * scale).to_mkldnn(),
        "quantized": lambda scale: torch.quantize_per_tensor(eye * scale, 0.1, 0, torch.qint8),
    }
    for layout, table in tables.items():
        torch.manual_seed(0)
        one = key(Lookup(table(1.0)))
        torch.manual_seed(0)
        assert key(Lookup(table(1.0))) == one, layout
        torch.manual_seed(0)
        assert key(Lookup(table(2.0))) != one, layout  # a change to the values the layout holds
    metas = [
        torch.empty(4, 4, device="meta"),
        torch.empty(4, 4, device="meta"),
        torch.empty(4, 4, device="meta").double(),
    ]
    keyed = []
    for meta in metas:  # no values: its shape and dtype
        torch.manual_seed(0)
        keyed.append(key(Lookup(meta)))
    assert keyed[0] == keyed[1] != keyed[2]


class Handle:
    """As a native library's function handle behind a JIT compiler: no `__dict__` of its own, and a
    `__getattr__` that answers every name, `__dict__` included, with something that is no mapping."""

    __slots__ = ("symbol",)

    def __init__(self, symbol: str) -> None:
        self.symbol = symbol

    def __getattr__(self, name: str) -> Handle:
        return Handle(f"{self.symbol}.{name}")

    def __call__(self, *args: object) -> object:
        raise RuntimeError(f"{self.symbol} is a native function")


class Jitted:
    """A JIT compiler's wrapper of a function: it holds the compiled handle; its `__getattr__` answers every name."""

    def __init__(self) -> None:
        self.handle = Handle("dtw")
        self.options = {"nopython": True}

    def __getattr__(self, name: str) -> object:
        return getattr(self.handle, name)

    def __call__(self, *args: object) -> object:
        return self.handle(*args)


def make_aligner() -> Any:
    aligner = Jitted()

    def align(x: torch.Tensor) -> object:  # a method's closure, as a model's `@jit`-wrapped helper's
        return aligner(x)

    return align


class Aligns(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)
        self.handle = Handle("timing")
        self.align = make_aligner()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.linear(x)
        return out


def test_an_object_that_answers_every_name_is_read_as_it_is_stored() -> None:
    """Walking a closure into a handle whose `__getattr__` answers `__dict__` failed the key (`'Handle' object is
    not callable` or `not iterable`): an object is read as the interpreter keeps it, never through __getattr__."""
    assert why_unkeyable(Aligns()) == ""
    assert code_digest(Aligns()) == code_digest(Aligns())


def test_an_error_in_the_key_code_is_torchyards_and_the_case_runs_uncached(monkeypatch: pytest.MonkeyPatch) -> None:
    """Whatever stops the key code, the case runs uncached, and the note names torchyard's file and the error:
    never a failure of the case's."""

    monkeypatch.setattr(keys, "SIMPLE", "no type")  # a bug planted in keys.py: `isinstance(obj, SIMPLE)` raises
    case = Case("policy", Policy, lambda generator: (torch.randn(2, 4, generator=generator),))
    lowered = lowering_key(case, "export", Policy(), case.calls()[0], torch.device("cpu"), options={})
    assert lowered.digest is None
    assert lowered.why.startswith(
        "torchyard's key code failed, a fault of torchyard's, not the model's: TypeError: isinstance() arg 2 must "
        "be a type"
    ), lowered.why
    assert "(at torchyard/inimage/evaluation/cache/keys.py:" in lowered.why
    assert lowered.notes("unkeyable") == {"cache": "unkeyable", "cache_why": lowered.why}


def test_a_case_can_opt_out_of_the_cache() -> None:
    case = Case("policy", Policy, lambda generator: (torch.randn(2, 4, generator=generator),), cache=False)
    lowered = lowering_key(case, "export", Policy(), case.calls()[0], torch.device("cpu"), options={})
    assert (lowered.digest, lowered.why) == (None, "case 'policy' sets cache=False")
    assert lowered.notes("unkeyable") == {"cache": "off", "cache_why": "case 'policy' sets cache=False"}
    assert lowered.notes("off") == {"cache": "off"}  # the run turned the cache off: nothing of the case's to say


class Dispatcher:
    """As a JIT compiler's dispatcher (numba's): a callable from a release that keeps the function it compiles and
    caches keyed by the memory addresses of what it compiled."""

    def __init__(self, function: Callable[[torch.Tensor], torch.Tensor]) -> None:
        self.py_func = function
        self.overloads = {f"<compiled {function.__name__} at {hex(id(self))}>": object()}

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return self.py_func(x)


Dispatcher.__module__ = "jitlib.core"


def _doubled(x: torch.Tensor) -> torch.Tensor:
    return x * 2


def _tripled(x: torch.Tensor) -> torch.Tensor:
    return x * 3


class Timed(torch.nn.Module):
    def __init__(self, jitted: Dispatcher) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)
        self.align = jitted

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.linear(x)
        return out


def test_a_released_compilers_dispatcher_counts_by_its_version_and_the_function_it_wraps(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 58 (whisper's model reaches numba's dispatchers through its timing module): the walk went into the
    dispatcher's caches, whose keys name memory addresses, so the whole model's key moved every run and it was
    never replayed, without a word. A release's callable counts by its version and the project function it wraps."""
    real = keys.released
    monkeypatch.setattr(keys, "released", lambda name: "jitlib==1.0" if name.startswith("jitlib") else real(name))
    first, again = Timed(Dispatcher(_doubled)), Timed(Dispatcher(_doubled))
    assert code_digest(first) == code_digest(again)  # two dispatchers, two addresses: one key
    assert code_digest(Timed(Dispatcher(_tripled))) != code_digest(first)  # the wrapped function counts


class Addressed:
    def __init__(self) -> None:
        self.name = f"{object()!r}"  # `<object object at 0x7f...>`: another text in every process


class HoldsAnAddress(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)
        self.tag = Addressed()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.linear(x)
        return out


WRAPPED_HELPERS = """
import functools
import torch


@functools.lru_cache
def scale_for(width):
    return 1.0 * width


@torch.jit.script
def scripted(x):
    return torch.relu(x) * 1.0


class Wrapped(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)

    def forward(self, x):
        return scripted(self.linear(x)) * scale_for(4)
"""


@pytest.mark.parametrize("helper", ["return 1.0 * width", "return torch.relu(x) * 1.0"])
def test_a_helper_behind_lru_cache_or_torch_jit_script_is_keyed_by_its_code(
    helper: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An outside repository's model: a change to a helper wrapped by `functools.lru_cache` or `torch.jit.script`
    left the lowered programs' key as it was (the wrapper counted by its class), so the stale program failed
    parity, blamed on export and ExecuTorch."""
    monkeypatch.syspath_prepend(str(tmp_path))

    def digest(text: str) -> str:
        (tmp_path / "wrapped_helpers.py").write_text(text)
        sys.modules.pop("wrapped_helpers", None)
        linecache.clearcache()
        module = importlib.import_module("wrapped_helpers")
        return code_digest(module.Wrapped())

    try:
        before = digest(WRAPPED_HELPERS)
        assert digest(WRAPPED_HELPERS) == before
        assert digest(WRAPPED_HELPERS.replace(helper, helper.replace("1.0", "2.0"))) != before
    finally:
        sys.modules.pop("wrapped_helpers", None)


def test_a_value_that_names_a_memory_address_makes_the_case_unkeyable_and_says_so() -> None:
    """A key that would differ every run is no key: the case runs uncached with a note, never a silent miss."""
    assert why_unkeyable(HoldsAnAddress()).startswith(
        "a value the model reaches names a memory address, which differs every run: '<object object at 0x"
    )


def test_every_device_is_keyed_by_its_model_as_its_row_says_it_is_named() -> None:
    """Issue 59: the artifact key named a CUDA or XPU device's model by hand, and any other left it out,
    silently. Each accelerator's row (`names.DEVICE_FACTS`) says what names its device, and torch answers it."""
    for name, facts in DEVICE_FACTS.items():
        if facts.named_by != "processor":
            module = getattr(torch, facts.named_by)
            assert callable(module.get_device_name) and callable(module.is_available), name
    assert device_identity(torch.device("cpu"))["processor"] == keys._cpu_model()
    with pytest.raises(keys.Unkeyable, match="no accelerator of torchyard's targets torch's 'meta' device"):
        device_identity(torch.device("meta"))
