"""What recording a replay's evidence costs a cold run (`evaluation.cache.record`): the built-in corpus's
references (the window the record covers: each case's factory and its forward in eager, float64 and on the
device) made with and without the record, alternated case by case in one process so both see the same machine,
beside a whole cold run's cost per case on inductor and ExecuTorch's XNNPACK delegate; then each case's
evaluation on those backends (lowering and run, caches off) plain and inside the record's backend window
(`recording(trace=False)`, as the suites lower), alternated. The figures are ratios of one run, never times.

    python benchmarks/records.py [--repeats N]   # with torch and ExecuTorch importable
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import tempfile
import time
from pathlib import Path

import torch

from torchyard.inimage.cases.builtin import CASES
from torchyard.inimage.evaluation import harness
from torchyard.inimage.evaluation.cache.record import recording
from torchyard.inimage.start.probe import CPU
from torchyard.inimage.start.tolerances import load_tolerances

BACKENDS = ("inductor", "executorch-xnnpack")


def reference_seconds(case: object, recorded: bool) -> float:
    started = time.perf_counter()
    if recorded:
        with recording():
            harness.case_reference(case, device=CPU, dtype=torch.float32)  # type: ignore[arg-type]
    else:
        harness.case_reference(case, device=CPU, dtype=torch.float32)  # type: ignore[arg-type]
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    plain: list[float] = []
    recorded: list[float] = []
    for case in CASES:
        reference_seconds(case, recorded=False)  # imports and first-call costs, paid by neither column
        for _ in range(args.repeats):
            plain.append(reference_seconds(case, recorded=False))
            recorded.append(reference_seconds(case, recorded=True))
    extra = sum(recorded) - sum(plain)
    tolerances = load_tolerances()
    torch._inductor.config.force_disable_caches = True  # each compile cold: the second of a pair finds no kernel
    lowered: dict[bool, float] = {False: 0.0, True: 0.0}
    with tempfile.TemporaryDirectory() as workdir:
        for backend in BACKENDS:  # imports and first-call costs (ExecuTorch's devtools: seconds), paid by neither
            harness.evaluate(
                CASES[0], backend, device=CPU, dtype=torch.float32, tolerances=tolerances,
                workdir=Path(workdir) / "first",
            )  # fmt: skip
        for position, case in enumerate(CASES):
            for backend in BACKENDS:
                for windowed in (False, True) if position % 2 else (True, False):  # alternated: both see the machine
                    started = time.perf_counter()
                    with recording(trace=False) if windowed else contextlib.nullcontext():
                        harness.evaluate(
                            case, backend, device=CPU, dtype=torch.float32, tolerances=tolerances,
                            workdir=Path(workdir) / f"{case.name}-{windowed}",
                        )  # fmt: skip
                    lowered[windowed] += time.perf_counter() - started
    cold = lowered[False]
    per_reference = extra / args.repeats
    print(f"cases: {len(CASES)}, repeats: {args.repeats}")
    print(f"references, plain: median {statistics.median(plain) * 1e3:.1f} ms a case")
    print(f"references, recorded: median {statistics.median(recorded) * 1e3:.1f} ms a case")
    print(f"recording over the corpus: {per_reference:.3f} s a run ({per_reference / cold:.2%} of a cold run "
          f"of {len(BACKENDS)} backends, {cold:.1f} s)")  # fmt: skip
    print(f"the backends' lowering and run, plain: {lowered[False]:.1f} s; in the record's window: "
          f"{lowered[True]:.1f} s (x{lowered[True] / lowered[False]:.3f})")  # fmt: skip


if __name__ == "__main__":
    main()
