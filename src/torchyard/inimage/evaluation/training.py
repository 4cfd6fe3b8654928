"""Training parity: one optimizer step from the case's deterministic weights and inputs, on the device
(eager, or with forward and backward compiled through AOTAutograd), compared leaf by leaf with the same step
in float64 on the CPU: the loss, every gradient, every parameter and optimizer state after the step, and the
buffers training updates (BatchNorm's running statistics).

The backend names say the module's mode and the optimizer: `train-eager-sgd`, `train-inductor-adamw`, and a
compile mode after a colon (`train-inductor-sgd:max-autotune`). Precision is the run's: float32 with TF32
off; bf16 and fp16 as autocast over float32 master weights, fp16 with `torch.amp.GradScaler` (gradients are
compared after unscaling).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils import _pytree as pytree

from torchyard.inimage.cases import Call, Case
from torchyard.inimage.evaluation.backends import BackendRun
from torchyard.inimage.evaluation.backends.compiled import compile_counted
from torchyard.inimage.evaluation.backends.inductor import graph_counts, graphs_since
from torchyard.inimage.evaluation.backends.running import synchronize
from torchyard.inimage.evaluation.errors import describe_error
from torchyard.inimage.evaluation.harness import FLOAT64, Reference
from torchyard.inimage.evaluation.metrics import UNBOUNDED, compare_values
from torchyard.inimage.evaluation.trees import Leaf, leaves, opaque_inputs, to_device
from torchyard.inimage.start.probe import CPU
from torchyard.names import TRAIN_TIMED_STEPS

ZERO = 1e-9  # of the step's largest gradient: zero in exact arithmetic
GROUP_FLOOR = 1e-2  # of a group's largest magnitude: a leaf below it is zero at that scale (`floors`)
SGD_LR, SGD_MOMENTUM = 0.1, 0.9
ADAMW_LR, ADAMW_WEIGHT_DECAY, ADAMW_EPS = 1e-2, 0.01, 1e-8
STATE_KEYS = {"sgd": ("momentum_buffer",), "adamw": ("exp_avg", "exp_avg_sq")}
SCALER_DEFAULTS = {"init_scale": 2.0**16, "growth_factor": 2.0, "backoff_factor": 0.5, "growth_interval": 2000}
STEP_FAILS = "the eager training step fails"  # how a reference that fails in the step (not the forward) begins
# How far past the eager step's own spread (`spread`) a leaf may miss the reference before it fails: a plain
# model's eager float32 step misses float64 by up to six times that spread (a transformer under AdamW,
# benchmarks/README.md), a wrong step by far more.
SPREAD_FACTOR = 10


@dataclass(frozen=True)
class TrainBackend:
    compiled: bool
    optimizer: str  # "sgd" or "adamw"
    mode: str = "default"
    # The module and its 4-D inputs in channels-last, as inductor's layout optimization runs a compiled step
    # with convolutions (`evaluations.channels_last_note`); no backend name says it
    channels_last: bool = False

    @classmethod
    def parse(cls, name: str) -> TrainBackend:
        base, _, mode = name.partition(":")
        _, kind, optimizer = base.split("-")
        return cls(kind == "inductor", optimizer, mode or "default")


def untrainable(case: Case) -> str | None:
    """Why `case` cannot train (None when it can): its own opt-out, no floating parameter, or nothing floating
    out of its forward to make a loss of (checked on the CPU, once)."""
    if not case.train:
        return f"case {case.name!r} opts out of training (train=False)"
    if case.compare == "statistics":
        return f"case {case.name!r} draws random numbers: no step to compare"
    module = case.module()
    if not any(p.requires_grad and p.is_floating_point() for p in module.parameters()):
        return f"case {case.name!r} has no floating parameter to train"
    with torch.no_grad():
        call = case.calls()[0]
        outputs = module(*call.args, **call.kwargs)
    if case.loss is None and not any(
        isinstance(leaf, torch.Tensor) and leaf.is_floating_point() for leaf in leaves(outputs)
    ):
        return f"case {case.name!r} has no floating output to make a loss of (give it a loss)"
    return None


def default_loss(outputs: object, call: Call) -> torch.Tensor:
    """The mean square of each floating output leaf, summed, in at least float32."""
    terms = [
        leaf.to(torch.promote_types(leaf.dtype, torch.float32)).pow(2).mean()
        for leaf in pytree.tree_leaves(outputs)
        if isinstance(leaf, torch.Tensor) and leaf.is_floating_point()
    ]
    return torch.stack(terms).sum()


def _optimizer(name: str, parameters: list[torch.nn.Parameter]) -> torch.optim.Optimizer:
    if name == "sgd":
        return torch.optim.SGD(parameters, lr=SGD_LR, momentum=SGD_MOMENTUM)
    return torch.optim.AdamW(parameters, lr=ADAMW_LR, weight_decay=ADAMW_WEIGHT_DECAY, eps=ADAMW_EPS)


def held_below(optimizer: str, largest: float, leaf_largest: float, gradient_bound: float) -> float:
    """Below this float64 gradient magnitude an element of a leaf is not stepped.

    - Zero in exact arithmetic (`ZERO` of the step's largest gradient): what the device has there is rounding.
    - With AdamW, whose first step is lr*g/(|g|+eps): below its eps, where the step turns from lr*sign(g) to
      linear with the slope lr/eps, which multiplies a gradient's float32 rounding (1e-10 on an element of
      1e-9) by a million; and within `gradient_bound` (the run's max scaled error for gradients) of zero at
      the leaf's scale (its largest, or `GROUP_FLOOR` of the step's largest where that is more), where a
      gradient that passes its bound may still have the other sign, and the step is lr either way.

    Such elements' gradients are still compared, and their rounding is inside the gradient's bounds."""
    exact_zero = ZERO * largest
    if optimizer != "adamw":
        return exact_zero
    return max(exact_zero, ADAMW_EPS, gradient_bound * max(leaf_largest, GROUP_FLOOR * largest))


def _jittered(module: torch.nn.Module, call: Call, jitter: float) -> Call:
    """Move `module`'s floating weights and buffers in place, and `call`'s floating inputs, each element by
    `jitter` of itself, up or down (a fixed draw); as they are where `jitter` is 0."""
    if not jitter:
        return call
    generator = torch.Generator().manual_seed(SPREAD_SEED)

    def moved(leaf: Any) -> Any:
        if not isinstance(leaf, torch.Tensor) or not leaf.is_floating_point():
            return leaf
        signs = torch.randint(0, 2, leaf.shape, generator=generator).to(device=leaf.device, dtype=leaf.dtype) * 2 - 1
        return leaf * (1 + jitter * signs)

    with torch.no_grad():
        for tensor in [*module.parameters(), *module.buffers()]:
            tensor.copy_(moved(tensor))
    args, kwargs = pytree.tree_map(moved, (tuple(call.args), dict(call.kwargs)))
    return Call(args, kwargs)


SPREAD_SEED = 58


@contextlib.contextmanager
def _autocast(device: torch.device, dtype: torch.dtype) -> Iterator[None]:
    if dtype in (torch.bfloat16, torch.float16):
        with torch.autocast(device.type, dtype=dtype):
            yield
    else:
        yield


def step(
    case: Case,
    backend: TrainBackend,
    *,
    device: torch.device,
    dtype: torch.dtype,
    master: torch.dtype,
    scale_gradients: Callable[[torch.Tensor], torch.Tensor] | None = None,
    frozen: dict[str, torch.Tensor] | None = None,
    timings: list[float] | None = None,
    gradient_bound: float = 0.0,
    jitter: float = 0.0,
) -> tuple[list[Leaf], list[str], dict[str, torch.Tensor]]:
    """One step; the leaves in a fixed order with their names, and which elements it held still. Given
    `timings`, `TRAIN_TIMED_STEPS` more steps follow the compared one, each timed (device synchronized) into it.

    `master` is the weights' dtype (float64 for the reference, float32 on the device); `dtype` the autocast
    dtype (float32: none). An element whose gradient is zero in exact arithmetic (a bias before BatchNorm,
    attention's key bias) gets rounding noise there, which AdamW would normalise into a step of up to lr/2;
    with AdamW, one below its eps or within `gradient_bound` of zero has no step its gradient's bounds decide
    (`held_below`): such elements (the reference's, when `frozen` is given) are not stepped. Their gradients
    are still compared, against their group's scale. AdamW's `exp_avg_sq` is compared as its square root, the
    gradients' RMS that the step divides by: in the gradients' units, with their relative error. `jitter`
    moves every floating weight, buffer and input by that relative amount, each element up or down at random
    (`spread`)."""
    module, call = _prepared(case, backend, device=device, master=master, jitter=jitter)
    named = [(name, p) for name, p in module.named_parameters() if p.requires_grad and p.is_floating_point()]
    optimizer = _optimizer(backend.optimizer, [p for _, p in named])
    loss_of = case.loss or default_loss

    forward = _forward(case, module, backend)

    def run(*args: Any, **kwargs: Any) -> torch.Tensor:
        with _autocast(device, dtype), _eager_random(backend):
            return loss_of(forward(*args, **kwargs), Call(args, kwargs))

    scaler = None
    if dtype == torch.float16:
        settings = {**SCALER_DEFAULTS, **case.scaler}
        scaler = torch.amp.GradScaler(
            device.type,
            init_scale=float(settings["init_scale"]),
            growth_factor=float(settings["growth_factor"]),
            backoff_factor=float(settings["backoff_factor"]),
            growth_interval=int(settings["growth_interval"]),
        )
    with torch.random.fork_rng(devices=[device] if device.type != "cpu" else []):
        torch.manual_seed(0)  # dropout and any other randomness: the same draw for the reference and each backend
        loss = run(*call.args, **call.kwargs)
        if scaler is not None:
            scaler.scale(loss).backward()  # type: ignore[no-untyped-call]
            scaler.unscale_(optimizer)  # gradients are compared unscaled
        else:
            loss.backward()  # type: ignore[no-untyped-call]
    grads = [p.grad.detach().clone() if p.grad is not None else None for _, p in named]
    if frozen is None:
        largest = max((float(g.abs().max()) for g in grads if g is not None and g.numel()), default=0.0)
        frozen = {
            name: g.abs() <= held_below(backend.optimizer, largest, float(g.abs().max()), gradient_bound)
            for (name, _), g in zip(named, grads, strict=True)
            if g is not None and g.numel()
        }
    for name, parameter in named:
        if parameter.grad is not None and name in frozen:
            parameter.grad = parameter.grad.masked_fill(frozen[name].to(parameter.grad.device), 0)
    if scale_gradients is not None:  # planted faults: what a broken step does to the gradients it steps on
        for _, parameter in named:
            if parameter.grad is not None:
                parameter.grad = scale_gradients(parameter.grad)
    if scaler is not None:
        scaler.step(optimizer)
        scaler.update()
    else:
        optimizer.step()
    values: list[Leaf] = [loss.detach()]
    names = ["loss"]
    for (name, parameter), grad in zip(named, grads, strict=True):
        values += [grad, parameter.detach()]
        names += [f"grad[{name}]", f"param[{name}]"]
        for key in STATE_KEYS[backend.optimizer]:  # None where a parameter got no step: the same leaves always
            state = optimizer.state[parameter].get(key)
            if isinstance(state, torch.Tensor) and key == "exp_avg_sq":
                state = state.sqrt()
            values.append(state.detach() if isinstance(state, torch.Tensor) else None)
            names.append(f"state[{name}].{key}" + (" (sqrt)" if key == "exp_avg_sq" else ""))
    for name, buffer in module.named_buffers():
        if buffer.is_floating_point():
            values.append(buffer.detach().clone())
            names.append(f"buffer[{name}]")
    if timings is not None:
        values = [value.clone() if isinstance(value, torch.Tensor) else value for value in values]
        for _ in range(TRAIN_TIMED_STEPS):
            timings.append(_timed_step(run, call, optimizer, scaler, device))
    return values, names, frozen


def _prepared(
    case: Case, backend: TrainBackend, *, device: torch.device, master: torch.dtype, jitter: float
) -> tuple[torch.nn.Module, Call]:
    """The case's module and first call on `device` in `master`, moved by `jitter` (`_jittered`), in
    channels-last where the backend says so."""
    module = case.fresh_module().to(dtype=master).to(device).train()
    if backend.channels_last:
        module = module.to(memory_format=torch.channels_last)
    call = _jittered(module, to_device(case.calls()[0], device, master), jitter)
    if backend.channels_last:
        call = Call(*pytree.tree_map(_channels_last, (tuple(call.args), dict(call.kwargs))))
    return module, call


def _channels_last(leaf: Any) -> Any:
    if isinstance(leaf, torch.Tensor) and leaf.dim() == 4:
        return leaf.contiguous(memory_format=torch.channels_last)
    return leaf


def _forward(case: Case, module: torch.nn.Module, backend: TrainBackend) -> Callable[..., Any]:
    """The module as the step calls it: compiled where the backend is (forward, and backward through
    AOTAutograd), from a compiler state of its own, each call required to run compiled code
    (`compiled.NotCompiled` otherwise)."""
    if not backend.compiled:
        return module
    compiled, tally = compile_counted(module, mode=backend.mode, fullgraph=case.fullgraph)
    return tally.checked(compiled)


def _eager_random(backend: TrainBackend) -> contextlib.AbstractContextManager[object]:
    """Compiled, random operators (dropout) draw as eager does (inductor's `fallback_random`: its own
    generator otherwise draws other numbers from the same seed, and the step differs by the draw, not the
    compile); the compile happens in the first call, under it."""
    if not backend.compiled:
        return contextlib.nullcontext()
    import torch._inductor.config  # inductor, only where a step is compiled

    patched: contextlib.AbstractContextManager[object] = torch._inductor.config.patch(fallback_random=True)
    return patched


def _timed_step(
    run: Callable[..., torch.Tensor], call: Call, optimizer: torch.optim.Optimizer, scaler: Any, device: torch.device
) -> float:
    """One more step (forward, loss, backward, optimizer step) from where the last left off, in seconds."""
    synchronize(device)
    started = time.perf_counter()
    optimizer.zero_grad(set_to_none=True)
    loss = run(*call.args, **call.kwargs)
    if scaler is not None:
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
    else:
        loss.backward()  # type: ignore[no-untyped-call]
        optimizer.step()
    synchronize(device)
    return time.perf_counter() - started


@dataclass(frozen=True)
class TrainReference:
    reference: Reference
    frozen: dict[str, torch.Tensor]


def make_train_reference(
    case: Case, optimizer: str, *, device: torch.device, dtype: torch.dtype, gradient_bound: float = 0.0
) -> TrainReference:
    """The step in float64 on the CPU (float32 at the highest precision where float64 fails, said so); the
    dtypes each leaf must have are the eager step's on the device at the run's precision. `gradient_bound`
    is the max scaled error the run allows a gradient of this optimizer's backends (`held_below`)."""
    backend = TrainBackend(False, optimizer)
    try:
        unseen = opaque_inputs(case.calls())
    except Exception:  # inputs that cannot be made: the step says so
        unseen = ""
    if unseen:
        return TrainReference(Reference([], [], [], "none", unseen), {})
    try:
        eager, _, _ = step(case, backend, device=device, dtype=dtype, master=torch.float32)
        expected = [leaf.dtype if isinstance(leaf, torch.Tensor) else None for leaf in eager]
    except Exception as error:
        failed = Reference([], [], [], "none", f"{STEP_FAILS} on {device.type}: {describe_error(error)}")
        return TrainReference(failed, {})
    try:
        outputs, names, frozen = step(
            case, backend, device=CPU, dtype=torch.float64, master=torch.float64, gradient_bound=gradient_bound
        )
        made = Reference([outputs], names, expected, FLOAT64, floors=floors(outputs, names))
        return TrainReference(
            _with_spread(made, case=case, backend=backend, device=device, dtype=dtype, frozen=frozen), frozen
        )
    except Exception as float64_error:
        why = describe_error(float64_error)
    try:
        outputs, names, frozen = step(
            case, backend, device=CPU, dtype=torch.float32, master=torch.float32, gradient_bound=gradient_bound
        )
    except Exception as error:
        reason = f"{STEP_FAILS} on the CPU in float64 ({why}) and in float32 ({describe_error(error)})"
        return TrainReference(Reference([], [], [], "none", reason), {})
    kind = f"float32 on cpu (float64 fails: {why})"
    made = Reference([outputs], names, expected, kind, floors=floors(outputs, names))
    return TrainReference(
        _with_spread(made, case=case, backend=backend, device=device, dtype=dtype, frozen=frozen), frozen
    )


def spread(
    case: Case,
    backend: TrainBackend,
    *,
    device: torch.device,
    dtype: torch.dtype,
    frozen: dict[str, torch.Tensor],
    floors: list[float],
) -> tuple[list[tuple[float, float, float]], list[Leaf]]:
    """Per leaf, how far two eager steps at the run's precision land apart when every weight and input moves by
    that precision's rounding (its unit roundoff, each element up or down): what the precision itself cannot
    hold for this model and optimizer (AdamW's step turns a near-zero gradient's rounding into a step of the
    learning rate's size). As the comparison measures a leaf: scaled max error, relative L2, 1 - cosine. With
    the first eager step's leaves (what the noise rule measures eager's own error by)."""
    unit = torch.finfo(dtype).eps / 2
    here, names, _ = step(case, backend, device=device, dtype=dtype, master=torch.float32, frozen=frozen)
    moved, _, _ = step(case, backend, device=device, dtype=dtype, master=torch.float32, frozen=frozen, jitter=unit)
    found = []
    for name, one, other, floor in zip(names, here, moved, floors, strict=True):
        if isinstance(one, torch.Tensor) and isinstance(other, torch.Tensor) and one.is_floating_point():
            apart = compare_values(other, one, other.dtype, UNBOUNDED, name, floor=floor)
            measured = (apart.scaled_max_error, apart.rel_l2_error, 1.0 - apart.cosine)
            found.append(measured if all(map(math.isfinite, measured)) else (0.0, 0.0, 0.0))
        else:
            found.append((0.0, 0.0, 0.0))
    return found, here


def step_noise(
    eager: list[Leaf], made: Reference, spreads: list[tuple[float, float, float]], optimizer: str
) -> list[tuple[float, float] | None]:
    """Per leaf, what the noise rule holds a step's leaf to: eager's own (scaled max, rel L2) error at the run's
    precision against the float64 step, or the precision's spread where that is wider (one eager step's own
    error can be a lucky draw). None without a finite one, and for AdamW's parameters: its first step moves
    each by the sign of its gradient, so a rounding that flips one sign is a whole step, and compiled steps
    land up to 6 times eager's own error apart on clean models (benchmarks/README.md, "The noise rule on
    training steps"); the precision-spread rule holds them. Its state, like every gradient, is linear in them."""
    noise: list[tuple[float, float] | None] = []
    for index, (output, expected) in enumerate(zip(eager, made.outputs[0], strict=False)):
        name = made.paths[index] if index < len(made.paths) else ""
        if optimizer == "adamw" and name.startswith("param["):
            noise.append(None)
            continue
        if not (isinstance(output, torch.Tensor) and isinstance(expected, torch.Tensor)) or not (
            output.is_floating_point() and output.shape == expected.shape
        ):
            noise.append(None)
            continue
        floor = made.floors[index] if index < len(made.floors) else 0.0
        measured = compare_values(output, expected, output.dtype, UNBOUNDED, "", floor=floor)
        own = (measured.scaled_max_error, measured.rel_l2_error)
        if not (measured.passed and all(map(math.isfinite, own))):
            noise.append(None)
            continue
        apart = spreads[index] if index < len(spreads) else (0.0, 0.0, 0.0)
        noise.append((max(own[0], apart[0]), max(own[1], apart[1])))
    return noise


def _with_spread(
    made: Reference,
    *,
    case: Case,
    backend: TrainBackend,
    device: torch.device,
    dtype: torch.dtype,
    frozen: dict[str, torch.Tensor],
) -> Reference:
    """`made`, each leaf's bounds widened to `SPREAD_FACTOR` times the eager step's own spread where that is
    wider, and, where `made` is the float64 step, each leaf held by the noise rule to float32's own error on it
    (`step_noise`); as made where the spread cannot be measured (the bounds alone decide then)."""
    try:
        spreads, eager = spread(case, backend, device=device, dtype=dtype, frozen=frozen, floors=made.floors)
    except Exception:  # the eager step ran once already: a second that fails leaves the plain bounds
        return made
    noise = [step_noise(eager, made, spreads, backend.optimizer)] if made.kind == FLOAT64 else []
    return dataclasses.replace(made, spreads=spreads, spread_factor=SPREAD_FACTOR, noise=noise)


def floors(outputs: list[Leaf], names: list[str]) -> list[float]:
    """Per leaf, a hundredth of the largest magnitude in its group (gradients, parameters, each optimizer
    state, buffers): a leaf below it is zero at that scale, and only its largest error counts, against it."""

    def group(name: str) -> str:
        return name.split("[", 1)[0] + (name.rsplit(".", 1)[1] if name.startswith("state[") else "")

    largest: dict[str, float] = {}
    for name, leaf in zip(names, outputs, strict=True):
        if isinstance(leaf, torch.Tensor) and leaf.is_floating_point() and leaf.numel():
            dense = leaf if leaf.layout == torch.strided else leaf.to_dense()  # a sparse buffer's values
            largest[group(name)] = max(largest.get(group(name), 0.0), float(dense.abs().max()))
    return [GROUP_FLOOR * largest.get(group(name), 0.0) if name != "loss" else 0.0 for name in names]


def train_runner(
    backend_name: str,
    autocast: torch.dtype,
    frozen: dict[str, torch.Tensor],
    scale_gradients: Callable[[torch.Tensor], torch.Tensor] | None = None,
    *,
    timed: bool = True,
    channels_last: bool = False,
) -> Callable[..., BackendRun]:
    """A runner (as the harness calls it, with float32 master weights) that takes one step on the device
    under `autocast` (float32: none) and, `timed`, times more; `scale_gradients` plants a broken step;
    `channels_last`: in that memory format."""
    backend = dataclasses.replace(TrainBackend.parse(backend_name), channels_last=channels_last)

    def run(case: Case, module: torch.nn.Module, calls: list[Call], device: torch.device, workdir: Any) -> BackendRun:
        started = time.perf_counter()
        master = next((p.dtype for p in module.parameters()), torch.float32)
        timings: list[float] = []
        before = graph_counts() if backend.compiled else None
        outputs, _, _ = step(
            case, backend, device=device, dtype=autocast, master=master, scale_gradients=scale_gradients,
            frozen=frozen, timings=timings if timed else None,
        )  # fmt: skip
        # The compared step's seconds include compiling; the step time is the median of the warm ones.
        first = time.perf_counter() - started - sum(timings)
        latency = statistics.median(timings) * 1e3 if timings else None
        # What compiled (graphs, graph breaks, recompilations), as the inference results of inductor record it.
        notes = graphs_since(before) if before is not None else {}
        return BackendRun([outputs], first, first, latency_ms=latency, notes=notes)

    return run


def scaler_contract(make_scaler: Callable[[], Any], device: torch.device) -> list[str]:
    """What a loss scaler must do, checked on `device` with a one-parameter model and SGD: a step whose
    gradients overflow (a planted inf) leaves the parameter and the optimizer state alone and lowers the
    scale by the backoff factor; the next finite step updates; the scale grows after the growth interval.
    Each broken promise is one line; none when the scaler keeps them all."""
    problems: list[str] = []
    parameter = torch.nn.Parameter(torch.ones(4, device=device))
    optimizer = torch.optim.SGD([parameter], lr=0.1, momentum=0.9)
    scaler = make_scaler()
    start = float(scaler.get_scale())

    def one_step(gradient: torch.Tensor) -> None:
        optimizer.zero_grad()
        scaler.scale((parameter * gradient).sum()).backward()
        scaler.step(optimizer)
        scaler.update()

    before = parameter.detach().clone()
    one_step(torch.tensor([1.0, float("inf"), 1.0, 1.0], device=device))
    if not torch.equal(parameter.detach(), before) or optimizer.state[parameter]:
        problems.append("stepped on an overflowing gradient (the parameter or the optimizer state moved)")
    if float(scaler.get_scale()) != start * scaler.get_backoff_factor():
        problems.append(f"scale {float(scaler.get_scale())} after an overflow, not {start} x the backoff factor")
    lowered = float(scaler.get_scale())
    one_step(torch.ones(4, device=device))
    if torch.equal(parameter.detach(), before):
        problems.append("a finite step after the overflow did not update the parameter")
    for _ in range(scaler.get_growth_interval() - 1):
        one_step(torch.ones(4, device=device))
    if float(scaler.get_scale()) != lowered * scaler.get_growth_factor():
        problems.append(
            f"scale {float(scaler.get_scale())} after the growth interval, not {lowered} x the growth factor"
        )
    return problems
