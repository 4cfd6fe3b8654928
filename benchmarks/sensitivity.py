"""Which planted faults each check catches (issue 68): a fault compiled into the backend's program only (a module
wrapped around one mid-network layer, so export, inductor and ExecuTorch's lowering all trace it), of each kind,
at sizes given as multiples of float32's own error on the output (eager float32 against float64, relative L2),
judged by torchyard (the noise rule, and the table's bounds alone) and, on the same tensors, by
`torch.testing.assert_close`, dynamo's benchmark check (`torch._dynamo.utils.same`, tol 1e-4) and ExecuTorch's
backend test suite's tolerances (`allclose`, atol 0.1, rtol 0.04).

    python benchmarks/sensitivity.py [--backend NAME ...] [--multiple M ...]   # torch importable; on the CPU
    python benchmarks/sensitivity.py --named      # the issue's own faults, each at the size it comes in

A fault's size: its own relative L2 effect on the output in float64 (the faulted model against the clean one),
over eager float32's relative L2 error taken as at least float32's machine epsilon, as the noise rule takes it;
faults are linear at these sizes, so one float64 run fixes each size. The named faults (a layer swapped for a
wrong one: LayerNorm's eps 1e-5 -> 0, BatchNorm's eps off by 2.4 %, tanh GELU for erf GELU, one feature
x(1+1e-4)) come at their own sizes, measured the same way.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import functools
import itertools
import tempfile
from collections.abc import Callable
from pathlib import Path

import torch
from conv_batchnorm_step import ConvBatchNorm  # the same conv net (run from the checkout: benchmarks/ is on the path)
from torch import nn
from torch._dynamo.utils import same

from torchyard.inimage.cases import Call, Case
from torchyard.inimage.evaluation.backends import BackendRun, Runner, choose, runner_for
from torchyard.inimage.evaluation.harness import Reference, case_reference, evaluate
from torchyard.inimage.evaluation.trees import leaves
from torchyard.inimage.start.tolerances import load_tolerances

CPU = torch.device("cpu")
BACKENDS = ("inductor", "executorch-portable", "executorch-xnnpack")
MULTIPLES = (3.0, 5.0, 10.0)


class Mlp(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.norm, self.act, self.fc2 = nn.Linear(32, 64), nn.LayerNorm(64), nn.GELU(), nn.Linear(64, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.norm(self.fc1(x))))  # type: ignore[no-any-return]


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(32), nn.LayerNorm(32)
        self.qkv, self.proj = nn.Linear(32, 96), nn.Linear(32, 32)
        self.ff1, self.ff2 = nn.Linear(32, 64), nn.Linear(64, 32)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, _ = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(batch, length, 3, 4, 8).permute(2, 0, 3, 1, 4)
        x = x + self.proj(nn.functional.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(x.shape))
        return x + self.ff2(torch.relu(self.ff1(self.norm2(x))))  # type: ignore[no-any-return]


def _eval(make: Callable[[], nn.Module]) -> Callable[[], nn.Module]:
    def made() -> nn.Module:
        torch.manual_seed(0)
        module = make().eval()
        for name, buffer in module.named_buffers():  # BatchNorm's statistics as training left them, not 0 and 1
            if name.endswith("running_mean"):
                buffer.normal_(0, 0.1)
            elif name.endswith("running_var"):
                buffer.uniform_(0.5, 1.5)
        return module

    return made


# model, its input, and the layer whose output the fault changes (mid-network)
MODELS: dict[str, tuple[Callable[[], nn.Module], tuple[int, ...], str]] = {
    "mlp": (_eval(Mlp), (8, 32), "norm"),
    "conv": (_eval(ConvBatchNorm), (4, 3, 16, 16), "norm1"),
    "block": (_eval(Block), (2, 16, 32), "ff1"),
}


class Faulted(nn.Module):
    """`inner`'s output scaled by 1 + size ("scale") or shifted by size ("bias") where `mask` is 1."""

    def __init__(self, inner: nn.Module, mask: torch.Tensor, kind: str, size: float) -> None:
        super().__init__()
        self.inner, self.kind, self.size = inner, kind, size
        self.register_buffer("mask", mask)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.inner(x)
        mask: torch.Tensor = self.get_buffer("mask")
        if self.kind == "scale":
            return out * (1 + self.size * mask)
        return out + self.size * mask


def masks(shape: torch.Size) -> dict[str, torch.Tensor]:
    """Where a fault lands: every element, one channel (a conv's dimension 1, else the features, the last), 1 % of
    the elements (at least one)."""
    generator = torch.Generator().manual_seed(1)
    channel = torch.zeros(shape)
    channel.select(1 if len(shape) == 4 else -1, 0).fill_(1.0)
    some = (torch.rand(shape, generator=generator) < 0.01).float()
    if not some.any():
        some.view(-1)[0] = 1.0
    return {"dense": torch.ones(shape), "one channel": channel, "1% of elements": some}


def planted(module: nn.Module, site: str, mask: torch.Tensor, kind: str, size: float) -> nn.Module:
    setattr(module, site, Faulted(getattr(module, site), mask.to(next(module.parameters()).dtype), kind, size))
    return module


def effect(make: Callable[[], nn.Module], x: torch.Tensor, site: str, mask: torch.Tensor, kind: str) -> float:
    """The relative L2 change a fault of size 1e-3 makes to the output, in float64: sizes scale from it."""
    with torch.no_grad():
        clean = make().double()(x.double())
        faulted = planted(make().double(), site, mask, kind, 1e-3)(x.double())
    return float((faulted - clean).norm() / clean.norm()) / 1e-3


def capturing(real: Runner, faulted: Callable[[nn.Module], nn.Module], seen: list[BackendRun]) -> Runner:
    def runner(case: Case, module: nn.Module, calls: list[Call], device: torch.device, workdir: Path) -> BackendRun:
        run = real(case, faulted(module), calls, device, workdir)
        seen.append(run)
        return run

    return runner


def field_checks(output: torch.Tensor, reference: torch.Tensor) -> dict[str, bool]:
    """Whether each of the field's checks passes `output` against the float64 reference, cast as they compare."""
    expected = reference.to(output.dtype)

    def closes(atol: float | None = None, rtol: float | None = None) -> bool:
        try:
            torch.testing.assert_close(output, expected, atol=atol, rtol=rtol)
        except AssertionError:
            return False
        return True

    return {
        "assert_close": closes(),
        "dynamo same": bool(same(expected, output, fp64_ref=reference, tol=1e-4)),
        "ExecuTorch suite": closes(atol=0.1, rtol=0.04),
    }


CHECKS = ("torchyard", "table alone", "assert_close", "dynamo same", "ExecuTorch suite")


@dataclasses.dataclass(frozen=True)
class Fault:
    site: str
    mask: torch.Tensor
    kind: str
    size: float

    def __call__(self, module: nn.Module) -> nn.Module:
        return planted(module, self.site, self.mask, self.kind, self.size)


def judged(
    case: Case, reference: Reference, backend: str, fault: Callable[[nn.Module], nn.Module], workdir: Path
) -> dict[str, bool] | str:
    """Each check's verdict on `backend`'s outputs with `fault` compiled in (pass: True), or why none was made."""
    tolerances = load_tolerances()
    torch._dynamo.reset()
    seen: list[BackendRun] = []
    bounds = tolerances.bounds("float32", backend)
    runner = capturing(runner_for(choose(backend, CPU)), fault, seen)
    result = evaluate(case, backend, device=CPU, dtype=torch.float32, tolerances=tolerances, workdir=workdir,
                      reference=reference, runner=runner, bounds=bounds)  # fmt: skip
    if result.status not in ("passed", "failed"):
        return f"{result.status}: {result.reason[:80]}"
    output = leaves(seen[-1].outputs[0])[0]
    expected = reference.outputs[0][0]
    assert isinstance(output, torch.Tensor) and isinstance(expected, torch.Tensor)
    table = evaluate(case, backend, device=CPU, dtype=torch.float32, tolerances=tolerances, workdir=workdir,
                     reference=reference, runner=_replaying(seen[-1]),
                     bounds=dataclasses.replace(bounds, noise_factor=0.0))  # fmt: skip
    verdicts = {"torchyard": result.status == "passed", "table alone": table.status == "passed"}
    return verdicts | field_checks(output, expected)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", action="append", default=[])
    parser.add_argument("--multiple", action="append", type=float, default=[])
    parser.add_argument("--model", action="append", default=[])
    parser.add_argument("--named", action="store_true", help="the named faults, at the sizes they come in")
    args = parser.parse_args()
    if args.named:
        with tempfile.TemporaryDirectory() as work:
            named(args.backend or list(BACKENDS), Path(work))
        return
    print(f"| model | fault | where | x float32's error | backend | {' | '.join(CHECKS)} |")
    print("|---|---|---|---|---|" + "---|" * len(CHECKS))
    with tempfile.TemporaryDirectory() as work:
        for name in args.model or MODELS:
            make, _, site = MODELS[name]
            x, case, reference, noise, floor = _measured(name)
            print(f"| {name} | (float32's own error: rel L2 {noise[1]:.3g}, taken as {floor:.3g}) |", flush=True)
            with torch.no_grad():
                site_shape = getattr(make(), site)(_input_of(make(), site, x)).shape
            for (where, mask), kind in itertools.product(masks(site_shape).items(), ("scale", "bias")):
                unit = effect(make, x, site, mask, kind)
                for multiple, backend in itertools.product(args.multiple or MULTIPLES, args.backend or BACKENDS):
                    fault = Fault(site, mask, kind, multiple * floor / unit)
                    verdicts = judged(case, reference, backend, fault, Path(work) / name / backend)
                    cells = (
                        verdicts
                        if isinstance(verdicts, str)
                        else " | ".join("pass" if verdicts[check] else "**FAIL**" for check in CHECKS)
                    )
                    print(f"| {name} | {kind} | {where} | {multiple:g} | {backend} | {cells} |", flush=True)


def _eps(module: nn.Module, eps: Callable[[float], float]) -> nn.Module:
    swapped = copy.deepcopy(module)
    swapped.eps = eps(swapped.eps)
    return swapped


def _one_feature(module: nn.Module) -> nn.Module:
    """`module` (a Linear) with its first output feature x(1+1e-4)."""
    swapped = copy.deepcopy(module)
    with torch.no_grad():
        swapped.weight[0] *= 1 + 1e-4
        swapped.bias[0] *= 1 + 1e-4
    return swapped


# The faults at the sizes they come in: model, the layer swapped, and what it is swapped for.
NAMED: dict[str, tuple[str, str, Callable[[nn.Module], nn.Module]]] = {
    "LayerNorm eps 1e-5 -> 0": ("block", "norm1", lambda layer: _eps(layer, lambda eps: 0.0)),
    "LayerNorm eps 1e-5 -> 0 (MLP)": ("mlp", "norm", lambda layer: _eps(layer, lambda eps: 0.0)),
    "BatchNorm eps x1.024": ("conv", "norm1", lambda layer: _eps(layer, lambda eps: eps * 1.024)),
    "tanh GELU for erf GELU": ("mlp", "act", lambda layer: nn.GELU(approximate="tanh")),
    "one feature x(1+1e-4)": ("mlp", "fc2", _one_feature),
    "one feature x(1+1e-4) (block)": ("block", "ff2", _one_feature),
}


@dataclasses.dataclass(frozen=True)
class Swap:
    site: str
    swapped: Callable[[nn.Module], nn.Module]

    def __call__(self, module: nn.Module) -> nn.Module:
        setattr(module, self.site, self.swapped(getattr(module, self.site)))
        return module


def _measured(name: str) -> tuple[torch.Tensor, Case, Reference, tuple[float, float], float]:
    """Model `name`'s input, case and float64 reference, float32's own (scaled, rel L2) error on its output, and
    that rel L2 error taken as at least float32's machine epsilon, as the noise rule takes it."""
    make, shape, _ = MODELS[name]
    x = torch.randn(shape, generator=torch.Generator().manual_seed(0))
    case = Case(f"sensitivity_{name}", make, functools.partial(_same_input, x))
    reference = case_reference(case, device=CPU, dtype=torch.float32)
    noise = reference.noise[0][0] if reference.noise else None
    assert noise is not None, reference.kind
    return x, case, reference, noise, max(noise[1], torch.finfo(torch.float32).eps)


def named(backends: list[str], work: Path) -> None:
    """The named faults: each one's size as a multiple of float32's own error, and each check's verdict."""
    print(f"| fault | model | x float32's error | backend | {' | '.join(CHECKS)} |")
    print("|---|---|---|---|" + "---|" * len(CHECKS))
    for label, (name, site, swapped) in NAMED.items():
        make = MODELS[name][0]
        x, case, reference, _, floor = _measured(name)
        fault = Swap(site, swapped)
        with torch.no_grad():
            clean = make().double()(x.double())
            faulted = fault(make().double())(x.double())
        multiple = float((faulted - clean).norm() / clean.norm()) / floor
        for backend in backends:
            verdicts = judged(case, reference, backend, fault, work / name / backend)
            cells = (
                verdicts
                if isinstance(verdicts, str)
                else " | ".join("pass" if verdicts[check] else "**FAIL**" for check in CHECKS)
            )
            print(f"| {label} | {name} | {multiple:.3g} | {backend} | {cells} |", flush=True)


def _same_input(x: torch.Tensor, generator: torch.Generator) -> tuple[torch.Tensor]:
    return (x.clone(),)


def _replaying(run: BackendRun) -> Runner:
    """A backend that gives `run`'s outputs again: the table's verdict on the very tensors the rule judged."""

    def runner(case: Case, module: nn.Module, calls: list[Call], device: torch.device, workdir: Path) -> BackendRun:
        return run

    return runner


def _input_of(model: nn.Module, site: str, x: torch.Tensor) -> torch.Tensor:
    """What the layer named `site` receives when `model` runs on `x`."""
    seen: list[torch.Tensor] = []
    handle = getattr(model, site).register_forward_pre_hook(lambda module, args: seen.append(args[0]))
    with torch.no_grad():
        model(x)
    handle.remove()
    return seen[0]


if __name__ == "__main__":
    main()
