"""The operators of the running torch's `op_db`, their samples as modules and calls, and the rules that set
operators and samples aside. Nothing is dropped silently: what a rule sets aside is kept with the rule's words."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils import _pytree as pytree

from torchyard.inimage.cases import Call, Case

# Operators whose values are drawn at random: their outputs cannot match a reference value for value.
RANDOM = frozenset({
    "bernoulli", "cauchy", "exponential", "geometric", "log_normal", "multinomial", "normal", "poisson",
    "rand_like", "randint", "randint_like", "randn", "randn_like", "uniform", "nn.functional.rrelu",
    "nn.functional.fractional_max_pool2d", "nn.functional.fractional_max_pool3d", "svd_lowrank", "pca_lowrank",
})  # fmt: skip
# Operators whose outputs are memory as it was found: any value is right.
UNINITIALIZED = frozenset({"empty", "empty_like", "empty_permuted", "empty_strided", "new_empty", "new_empty_strided"})
# Dropout outside a module's eval mode is random too; these draw whatever `training` says.
DROPOUT = "dropout"

# The quick subset CI runs: a few dozen operators across the families (elementwise, reductions, shapes and
# indexing, normalization, convolution and pooling, linear algebra), and a few that a rule sets aside.
QUICK = (
    "abs", "exp", "tanh", "sigmoid", "rsqrt", "sin", "erf",
    "add", "mul", "div", "pow", "maximum", "where", "clamp",
    "sum", "mean", "amax", "var", "cumsum", "softmax", "log_softmax",
    "cat", "narrow", "permute", "reshape", "transpose", "expand", "index_select", "gather", "flip",
    "nn.functional.gelu", "nn.functional.silu", "nn.functional.hardtanh", "nn.functional.layer_norm",
    "nn.functional.linear", "nn.functional.conv2d", "nn.functional.max_pool2d", "nn.functional.avg_pool2d",
    "nn.functional.embedding", "matmul", "addmm", "bmm", "linalg.vector_norm",
    "bernoulli", "empty_like", "nn.functional.dropout",
)  # fmt: skip


@dataclass(frozen=True)
class Sample:
    """One call of an operator, as an OpInfo's `SampleInput` gives it."""

    input: Any
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Operator:
    """An operator to sweep: its name (an OpInfo's name, `.variant` where it has one), the function, its
    samples on a device in a dtype, and why it is set aside ("" where it is not)."""

    name: str
    function: Callable[..., Any]
    samples: Callable[[torch.device, torch.dtype], Iterable[Sample]]
    set_aside: str = ""
    base: str = ""  # the OpInfo's name without its variant ("" where it has none)


def op_db_operators(dtype: torch.dtype, device: torch.device) -> list[Operator]:
    """Every OpInfo of the running torch, named as `test_torchinductor_opinfo` names them (`name.variant`)."""
    from torch.testing._internal.common_methods_invocations import op_db

    operators = []
    for info in op_db:
        function, why = callable_of(info)
        aside = operator_set_aside(info, dtype, device) or why
        operators.append(Operator(_name(info), function, functools.partial(_samples, info), aside, info.name))
    return operators


def callable_of(info: Any) -> tuple[Callable[..., Any], str]:
    """What to call for an OpInfo, and why it cannot be swept where nothing can ("" where it can).

    PyTorch marks the OpInfos of operators that may draw at random by wrapping their call in
    `wrapper_set_seed` (it seeds the generator around each call), which dynamo refuses to trace (it skips
    torch.testing's code). Where the OpInfo's name is a function of torch's (dropout's, attention's), that
    function is called instead, and a sample that draws (dropout in training) is set aside by
    `sample_set_aside`; where it is not, the operator is set aside."""
    code = getattr(info.op, "__code__", None)
    if code is None or "wrapper_set_seed" not in code.co_names:
        return info.op, ""
    found: Any = torch
    for part in str(info.name).split("."):
        found = getattr(found, part, None)
    if callable(found):
        return found, ""
    return info.op, "seeded: its OpInfo seeds the generator around each call, and names no function of torch's"


def _name(info: Any) -> str:
    return f"{info.name}.{info.variant_test_name}" if info.variant_test_name else str(info.name)


def _samples(info: Any, device: torch.device, dtype: torch.dtype) -> Iterable[Sample]:
    for sample in info.sample_inputs(device, dtype, requires_grad=False):
        yield Sample(sample.input, tuple(sample.args), dict(sample.kwargs))


def operator_set_aside(info: Any, dtype: torch.dtype, device: torch.device) -> str:
    """The rule that sets an OpInfo aside, in words; "" where none does."""
    name = str(info.name)
    if name in RANDOM:
        return "random: its values are drawn at random"
    if name in UNINITIALIZED:
        return "uninitialized: its output is memory as found"
    if getattr(info, "has_nondeterministic_output", False):
        return "nondeterministic: its OpInfo says its output is not deterministic"
    if not info.supports_dtype(dtype, device.type):
        return f"dtype: no {str(dtype).removeprefix('torch.')} on {device.type} in its OpInfo"
    return ""


def sample_set_aside(operator: Operator, sample: Sample) -> str:
    """The rule that sets one sample aside, in words; "" where none does. Dropout draws at random where its
    probability (dropout's `p`, attention's `dropout_p`) is above 0 in training mode (a function without a
    `training` parameter, scaled dot-product attention's, always draws); the arguments are read as the
    function binds them, so a probability given by position or left to its default counts too."""
    leaves = pytree.tree_leaves((sample.input, sample.args, sample.kwargs))
    if any(isinstance(leaf, torch.Tensor) and leaf.layout != torch.strided for leaf in leaves):
        return "sparse: a sparse or otherwise non-strided input"
    arguments = _bound(operator.function, sample)
    probability = arguments.get("dropout_p", arguments.get("p") if DROPOUT in operator.name else None)
    training = arguments.get("training", True)
    if isinstance(probability, int | float) and probability > 0 and training:
        return "random: dropout in training mode"
    return ""


def _bound(function: Callable[..., Any], sample: Sample) -> dict[str, Any]:
    """The sample's arguments by parameter name, defaults included; none where the signature is not readable."""
    try:
        bound = inspect.signature(function).bind(sample.input, *sample.args, **sample.kwargs)
    except (TypeError, ValueError):
        return dict(sample.kwargs)
    bound.apply_defaults()
    return dict(bound.arguments)


def chosen_samples(
    operator: Operator, device: torch.device, dtype: torch.dtype, count: int
) -> list[tuple[int, Sample | str]]:
    """The operator's first `count` samples that no rule sets aside, each numbered as its OpInfo yields it
    (under a fixed seed, so the numbers name the same samples every run of a stack), with the samples set
    aside before them kept as their rule."""
    chosen: list[tuple[int, Sample | str]] = []
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        for index, sample in enumerate(operator.samples(device, dtype)):
            if sum(not isinstance(kept, str) for _, kept in chosen) >= count:
                break
            chosen.append((index, sample_set_aside(operator, sample) or sample))
    return chosen


class _Input:
    """A tensor's place among an `OpModule`'s constants (None is a constant of its own: `dim=None`)."""

    def __repr__(self) -> str:  # the artifact cache's key holds it: the same every run
        return "<input>"


class OpModule(torch.nn.Module):
    """One operator applied to one sample: the sample's tensors are the module's inputs, everything else in
    it (sizes, dims, flags) is a constant of the module, as a model's code holds its own."""

    def __init__(self, function: Callable[..., Any], sample: Sample) -> None:
        super().__init__()
        flat, self.spec = pytree.tree_flatten((sample.input, sample.args, sample.kwargs))
        self.function = function
        # Per leaf: an input's place where it is a tensor, else the constant itself.
        self.constants = [_Input() if isinstance(leaf, torch.Tensor) else leaf for leaf in flat]
        self.described = repr(self.constants)  # what the artifact cache's key holds of the constants

    def forward(self, *tensors: torch.Tensor) -> Any:
        given = iter(tensors)
        flat = [next(given) if isinstance(constant, _Input) else constant for constant in self.constants]
        first, args, kwargs = pytree.tree_unflatten(flat, self.spec)
        result = self.function(first, *args, **kwargs)
        return tuple(result) if isinstance(result, tuple) else result  # a return type's fields as a plain tuple


def sample_case(operator: Operator, index: int, sample: Sample) -> Case:
    """The sample as a case of the harness: its module and its one call (the sample's tensors, in order)."""
    tensors = [
        leaf
        for leaf in pytree.tree_leaves((sample.input, sample.args, sample.kwargs))
        if isinstance(leaf, torch.Tensor)
    ]
    call = Call(tuple(tensor.detach().clone() for tensor in tensors))
    return Case(
        name=f"op-{operator.name}-{index}",
        make_module=functools.partial(OpModule, operator.function, sample),
        make_inputs=lambda generator: call,
        description=f"{operator.name}, sample {index}",
        train=False,
    )


def select(operators: Sequence[Operator], names: Sequence[str]) -> list[Operator]:
    """The named operators, in the order named (an OpInfo's variants too, where a name has them); a name that
    is none of them is an error that says so."""
    by_name: dict[str, list[Operator]] = {}
    for operator in operators:
        for name in dict.fromkeys((operator.name, operator.base or operator.name)):
            by_name.setdefault(name, []).append(operator)
    unknown = [name for name in names if name not in by_name]
    if unknown:
        raise KeyError(f"no operator named {', '.join(map(repr, unknown))} in this torch's op_db")
    return [operator for name in dict.fromkeys(names) for operator in by_name[name]]
