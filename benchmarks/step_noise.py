"""The noise rule on training steps (issue 68): per case and optimizer, each leaf's error in the compiled step
(inductor) against the float64 step, as a multiple of what the rule holds it to: eager's own error on the step,
or the precision's spread where wider, each at least float32's machine epsilon. A clean model must stay under the
noise factor (8). The largest multiple is printed with AdamW's parameters and without them (the rule leaves them
to the precision-spread rule: its first step moves each by its gradient's sign).

    python benchmarks/step_noise.py [--path DIR --cases MODULE[:LIST]]   # torch importable; on the CPU

Without --cases it takes torchyard's built-in corpus; a cases module is named as an entry's `cases` names it.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import tempfile
from pathlib import Path

import torch

from torchyard.inimage.cases.builtin import CASES
from torchyard.inimage.evaluation.harness import evaluate
from torchyard.inimage.evaluation.training import make_train_reference, train_runner
from torchyard.inimage.start.tolerances import load_tolerances

CPU = torch.device("cpu")
EPS = torch.finfo(torch.float32).eps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--path", default="")
    parser.add_argument("--cases", default="")
    args = parser.parse_args()
    cases = CASES
    if args.cases:
        sys.path.insert(0, args.path or ".")
        module, _, names = args.cases.partition(":")
        cases = getattr(importlib.import_module(module), names or "CASES")
    tolerances = load_tolerances()
    print("| case | optimizer | compiled step | largest multiple, every leaf | without AdamW's parameters |")
    print("|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as work:
        for case in cases:
            for optimizer in ("sgd", "adamw"):
                try:
                    made = make_train_reference(case, optimizer, device=CPU, dtype=torch.float32)
                except Exception as error:  # a case the step cannot take: said, and the next
                    print(f"| {case.name} | {optimizer} | {type(error).__name__} | | |")
                    continue
                results = {}
                for backend in (f"train-eager-{optimizer}", f"train-inductor-{optimizer}"):
                    torch._dynamo.reset()
                    results[backend] = evaluate(
                        case, backend, device=CPU, dtype=torch.float32, weights=torch.float32, tolerances=tolerances,
                        workdir=Path(work) / case.name, reference=made.reference,
                        runner=train_runner(backend, torch.float32, made.frozen),
                    )  # fmt: skip
                eager, compiled = results[f"train-eager-{optimizer}"], results[f"train-inductor-{optimizer}"]
                if not eager.comparisons or not compiled.comparisons:
                    print(f"| {case.name} | {optimizer} | {compiled.status} | | |")
                    continue
                every, kept = 0.0, 0.0
                for index, (own, found) in enumerate(zip(eager.comparisons, compiled.comparisons, strict=False)):
                    spread = made.reference.spreads[index] if index < len(made.reference.spreads) else (0, 0, 0)
                    scaled = max(own.scaled_max_error, spread[0], EPS)
                    rel_l2 = max(own.rel_l2_error, spread[1], EPS)
                    multiple = max(found.scaled_max_error / scaled, found.rel_l2_error / rel_l2)
                    every = max(every, multiple)
                    if not (optimizer == "adamw" and found.output.startswith("param[")):
                        kept = max(kept, multiple)
                print(f"| {case.name} | {optimizer} | {compiled.status} | {every:.2f} | {kept:.2f} |", flush=True)


if __name__ == "__main__":
    main()
