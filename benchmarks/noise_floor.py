"""The noise rule's false FAILs (issue 68): every case of a corpus on every inference backend, held to the table's
bounds alone and to the noise rule, with each output's error as a multiple of eager's own float32 error against
float64 (the margin the rule leaves: a clean backend must stay under the noise factor).

    python benchmarks/noise_floor.py [--path DIR] [--cases MODULE[:LIST] ...] [--backend NAME ...]   # on the CPU

Without --cases it takes torchyard's built-in corpus; a cases module is named as an entry's `cases` names it
(its CASES, or the list after the colon), importable from --path.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
import tempfile
from pathlib import Path

import torch

from torchyard.inimage.cases import load_cases
from torchyard.inimage.cases.builtin import CASES
from torchyard.inimage.evaluation.harness import Result, case_reference, evaluate
from torchyard.inimage.evaluation.metrics import beyond_bounds
from torchyard.inimage.start.tolerances import Bounds, load_tolerances

BACKENDS = ("export", "inductor", "aotinductor", "executorch-portable", "executorch-xnnpack")
CPU = torch.device("cpu")


def table_fails(result: Result, bounds: Bounds) -> bool:
    """Whether `result` fails the table's bounds alone: a miss the noise rule made passes them."""
    plain = dataclasses.replace(bounds, noise_factor=0.0)
    return result.status == "failed" and (
        not result.comparisons
        or any(
            comparison.problem
            and (comparison.noise is None or beyond_bounds(
                comparison.scaled_max_error, comparison.rel_l2_error, comparison.cosine, plain))
            for comparison in result.comparisons
        )
    )  # fmt: skip


def margin(result: Result) -> float:
    """The largest multiple of eager's own error any output of `result` reaches (rel L2 or scaled max error)."""
    least = torch.finfo(torch.float32).eps
    ratios = [
        max(comparison.scaled_max_error / max(comparison.noise[0], least),
            comparison.rel_l2_error / max(comparison.noise[1], least))
        for comparison in result.comparisons
        if comparison.noise is not None
    ]  # fmt: skip
    return max(ratios, default=math.nan)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", action="append", default=[])
    parser.add_argument("--path", action="append", default=[], help="a folder the cases modules import from")
    parser.add_argument("--backend", action="append", default=[])
    args = parser.parse_args()
    sys.path[:0] = args.path
    cases = load_cases(args.cases, use_entry_points=False, builtin=False) if args.cases else CASES
    tolerances = load_tolerances()
    counts = {"table": 0, "noise": 0, "judged": 0}
    print("| case | backend | table | noise rule | largest multiple of eager's own error |")
    print("|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as work:
        for case in cases:
            if case.compare == "statistics":
                continue
            reference = case_reference(case, device=CPU, dtype=torch.float32)
            for backend in args.backend or BACKENDS:
                if not case.applies_to(backend) or case.known_failure(backend) is not None:
                    continue
                bounds = tolerances.bounds("float32", backend, case.tolerances)
                result = evaluate(
                    case,
                    backend,
                    device=CPU,
                    dtype=torch.float32,
                    tolerances=tolerances,
                    workdir=Path(work) / case.name / backend,
                    reference=reference,
                    bounds=bounds,
                )
                if result.status not in ("passed", "failed"):
                    continue
                table = "failed" if table_fails(result, bounds) else "passed"
                counts["judged"] += 1
                counts["table"] += table == "failed"
                counts["noise"] += result.status == "failed"
                print(f"| {case.name} | {backend} | {table} | {result.status} | {margin(result):.2f} |", flush=True)
    print(f"\n{counts['judged']} results judged: {counts['table']} fail the table's bounds, "
          f"{counts['noise']} the noise rule")  # fmt: skip


if __name__ == "__main__":
    main()
