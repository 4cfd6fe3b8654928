"""Lock benchmarks, measured side by side in one run (ratios, not absolute promises).

1. `torchyard lock --check` over the whole matrix (offline; includes the one `uv --version` call).
2. Locking every entry this machine can reach (uv, through `torchyard lock`).
3. uv against pip-tools' `pip-compile --generate-hashes` on the same inputs (the `cpu` entry).

Run: `python benchmarks/lock.py --pip-compile PATH/TO/pip-compile` from the repository root, with
torchyard and uv installed. pip-compile resolves for the running interpreter, so run it on the entry's
Python (3.11 for `cpu`).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from torchyard.lock.check import lock_freshness
from torchyard.lock.resolve import lock_entry, uv_version
from torchyard.matrix import load_plan


def timed(function: object, repeat: int = 1) -> float:
    samples = []
    for _ in range(repeat):
        started = time.perf_counter()
        function()  # type: ignore[operator]
        samples.append(time.perf_counter() - started)
    return statistics.median(samples)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pip-compile", required=True)
    parser.add_argument("--entries", nargs="+", default=["cpu", "rocm"])
    args = parser.parse_args()
    plan = load_plan(Path("matrix.toml"))
    lockdir = Path("lockfiles")

    def check_all() -> None:
        version = uv_version(lambda a, **k: subprocess.run(a, capture_output=True, text=True, check=True))  # type: ignore[arg-type]
        for entry in plan.entries:
            lock_freshness(entry, lockdir, version)

    check_seconds = timed(check_all, repeat=20)
    with tempfile.TemporaryDirectory() as scratch:
        lock_seconds = timed(lambda: [lock_entry(plan.entry(name), Path(scratch), {}) for name in args.entries])
        cpu = plan.entry("cpu")
        uv_cpu = timed(lambda: lock_entry(cpu, Path(scratch), {}))
        uv_cold = timed(lambda: lock_entry(cpu, Path(scratch), {}, env={**os.environ, "UV_NO_CACHE": "1"}))
        requirements = Path(scratch) / "requirements.in"
        requirements.write_text("".join(f"{line}\n" for line in cpu.requirements))
        env = {**os.environ, "PIP_CONFIG_FILE": os.devnull}
        command = [
            args.pip_compile, "--quiet", "--generate-hashes", "--no-header", "--rebuild",
            "--index-url", cpu.indexes[0].url, "--output-file", str(Path(scratch) / "pip-tools.txt"), str(requirements),
        ]  # fmt: skip
        pip_tools = timed(lambda: subprocess.run(command, check=True, env=env))
    print(
        f"| freshness check, whole matrix ({len(plan.entries)} entries), median of 20 | {check_seconds * 1000:.0f} ms |"
    )
    print(f"| lock {', '.join(args.entries)} with uv (cold uv cache not forced) | {lock_seconds:.1f} s |")
    print(f"| cpu entry: uv pip compile, warm uv cache | {uv_cpu:.1f} s |")
    print(f"| cpu entry: uv pip compile, no cache (UV_NO_CACHE=1) | {uv_cold:.1f} s |")
    print(f"| cpu entry: pip-compile (pip-tools, --rebuild), same inputs | {pip_tools:.1f} s |")
    print(f"| ratio pip-compile / uv without cache | {pip_tools / uv_cold:.0f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
