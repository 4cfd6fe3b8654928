"""Why a conv net's compiled training step misses the float64 step (issue 68): each gradient's relative L2 error
against the float64 step, for eager (contiguous and channels-last), dynamo's AOTAutograd backends and inductor
(with and without its layout optimization), and BatchNorm's backward alone in each layout; and the step torch's
own bisector names. Each figure is also given as a multiple of the contiguous eager step's own error.

    python benchmarks/conv_batchnorm_step.py [--bisect]   # with torch importable; on the CPU
"""

from __future__ import annotations

import argparse
import copy
from collections.abc import Callable

import torch
import torch._inductor.config as inductor_config
from torch import nn
from torch._inductor.compiler_bisector import CompilerBisector

Grads = dict[str, torch.Tensor]


class ConvBatchNorm(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1, self.norm1 = nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8)
        self.conv2, self.norm2 = nn.Conv2d(8, 16, 3, padding=1), nn.BatchNorm2d(16)
        self.head = nn.Linear(16, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.norm1(self.conv1(x)))
        x = torch.relu(self.norm2(self.conv2(x)))
        return self.head(x.mean((2, 3)))  # type: ignore[no-any-return]


def gradients(model: nn.Module, x: torch.Tensor, backend: str | None = None, *, channels_last: bool = False) -> Grads:
    module = copy.deepcopy(model).train()
    if channels_last:
        module, x = module.to(memory_format=torch.channels_last), x.contiguous(memory_format=torch.channels_last)
    torch._dynamo.reset()
    forward = torch.compile(module, backend=backend) if backend else module
    forward(x).pow(2).mean().backward()
    return {name: p.grad.double() for name, p in module.named_parameters() if p.grad is not None}


def errors(got: Grads, reference: Grads) -> dict[str, float]:
    return {name: float((got[name] - reference[name]).norm() / reference[name].norm()) for name in reference}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bisect", action="store_true", help="also run torch's bisector on the inductor step")
    args = parser.parse_args()
    torch.manual_seed(0)
    model, x = ConvBatchNorm(), torch.randn(4, 3, 16, 16)
    reference = gradients(copy.deepcopy(model).double(), x.double())
    eager = errors(gradients(model, x), reference)
    runs: dict[str, Callable[[], Grads]] = {
        "eager": lambda: gradients(model, x),
        "eager, channels-last": lambda: gradients(model, x, channels_last=True),
        "aot_eager": lambda: gradients(model, x, "aot_eager"),
        "aot_eager_decomp_partition": lambda: gradients(model, x, "aot_eager_decomp_partition"),
        "inductor": lambda: gradients(model, x, "inductor"),
    }
    names = [name for name in reference if name.endswith("weight")]
    print("| step | " + " | ".join(f"grad[{name}]" for name in names) + " |")
    print("|---|" + "---|" * len(names))
    rows = dict(runs)
    rows["inductor, layout_optimization off"] = lambda: _without_layout_optimization(model, x)
    for label, run in rows.items():
        found = errors(run(), reference)
        cells = (f"{found[name]:.2e} ({found[name] / eager[name]:.0f}x)" for name in names)
        print(f"| {label} | " + " | ".join(cells) + " |")
    norm, inputs, upstream = nn.BatchNorm2d(8).train(), torch.randn(4, 8, 16, 16) * 3 + 1, torch.randn(4, 8, 16, 16)
    exact = _norm_weight_gradient(norm.double(), inputs.double(), upstream.double())
    for layout in (torch.contiguous_format, torch.channels_last):
        found = _norm_weight_gradient(norm.float(), inputs.to(memory_format=layout), upstream.to(memory_format=layout))
        print(f"BatchNorm2d backward alone, {layout}: grad[weight] {float((found - exact).norm() / exact.norm()):.2e}")
    if args.bisect:

        def correct() -> bool:
            found = errors(gradients(model, x, "inductor"), reference)
            return all(found[name] <= 10 * eager[name] for name in found)

        print("bisector:", CompilerBisector.do_bisect(correct))


def _without_layout_optimization(model: nn.Module, x: torch.Tensor) -> Grads:
    with inductor_config.patch(layout_optimization=False):
        return gradients(model, x, "inductor")


def _norm_weight_gradient(norm: nn.Module, inputs: torch.Tensor, upstream: torch.Tensor) -> torch.Tensor:
    norm = copy.deepcopy(norm)
    norm(inputs.clone().requires_grad_()).backward(upstream)
    return norm.weight.grad.double()  # type: ignore[union-attr]


if __name__ == "__main__":
    main()
