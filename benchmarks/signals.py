"""What measuring a change's signals costs a run: the built-in corpus evaluated on inductor and ExecuTorch's
XNNPACK delegate in one process, as a cold run evaluates them (empty caches), with the time spent in the
signals' own code (dynamo's graph, break and recompile accounting; ExecuTorch's `get_delegation_info`) taken
apart from each evaluation's whole time. A warm run replays its results, signals included, and measures
nothing again: its cost is the host's comparison, timed here on the cold run's results held to themselves.

    python benchmarks/signals.py [--case NAME ...]   # with torch and ExecuTorch importable
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import torch

from torchyard.inimage.cases.builtin import CASES
from torchyard.inimage.evaluation import harness
from torchyard.inimage.evaluation.backends import executorch, inductor
from torchyard.inimage.start.probe import CPU
from torchyard.inimage.start.tolerances import load_tolerances
from torchyard.reports.compare import compare
from torchyard.reports.merge import run_of

Wrapped = TypeVar("Wrapped", bound=Callable[..., Any])
BACKENDS = ("inductor", "executorch-xnnpack")


DEPTH = [0]  # a signal's function called from another's (graphs_since reads graph_counts) is counted once


def timed_into(spent: list[float], function: Wrapped) -> Wrapped:
    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        DEPTH[0] += 1
        try:
            return function(*args, **kwargs)
        finally:
            DEPTH[0] -= 1
            if not DEPTH[0]:
                spent.append(time.perf_counter() - started)

    return wrapper  # type: ignore[return-value]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", action="append", default=[], help="a built-in case (default: every one)")
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="torchyard-signals-"))
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(scratch / "inductor"))  # cold: read when it compiles
    spent: list[float] = []
    inductor.graph_counts = timed_into(spent, inductor.graph_counts)
    inductor.graphs_since = timed_into(spent, inductor.graphs_since)
    executorch.delegation = timed_into(spent, executorch.delegation)
    cases = [case for case in CASES if not args.case or case.name in args.case]
    bounds = load_tolerances()
    rows, records = [], []
    for case in cases:
        for backend in BACKENDS:
            torch._dynamo.reset()
            before = len(spent)
            started = time.perf_counter()
            result = harness.evaluate(
                case, backend, device=CPU, dtype=torch.float32, tolerances=bounds, workdir=scratch / case.name
            )
            whole = time.perf_counter() - started
            signals = sum(spent[before:])
            rows.append((case.name, backend, result.status, whole, signals))
            records.append({**result.as_dict(), "suite": "parity", "outcome": result.status})
            print(
                f"{case.name} on {backend}: {result.status}, {whole:.2f} s, signals {signals * 1000:.1f} ms", flush=True
            )
    report = scratch / "parity.json"
    report.write_text(json.dumps({"environment": {"entry": "bench"}, "results": records}, default=str))
    run = run_of(report, json.loads(report.read_text()))
    started = time.perf_counter()
    compare(run, run, quiet=False)
    comparing = time.perf_counter() - started
    total, signals = sum(row[3] for row in rows), sum(row[4] for row in rows)
    print("\n| backend | results | evaluation s | signals s | signals' share |\n|---|---|---|---|---|")
    for backend in BACKENDS:
        mine = [row for row in rows if row[1] == backend]
        whole, own = sum(row[3] for row in mine), sum(row[4] for row in mine)
        print(f"| {backend} | {len(mine)} | {whole:.1f} | {own:.3f} | {own / whole:.2%} |")
    print(f"| all | {len(rows)} | {total:.1f} | {signals:.3f} | {signals / total:.2%} |")
    print(f"\nthe host's comparison of these {len(records)} results with themselves: {comparing * 1000:.2f} ms")
    print(f"torch {torch.__version__}; scratch {scratch}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
