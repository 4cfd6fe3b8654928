"""AOTInductor's own round trip on a device, outside torchyard: a small module exported, compiled into a `.pt2`
package, then loaded back (`torch._inductor.aoti_load_package`) and run, each step in a fresh interpreter so a
crash is an exit status. On the lent H200 machine at torch 2.11.0+cu130 the load ended in a segmentation fault
(docs/runs.md); this tells whether a stack has that fault before its `aot` suite runs.

    python benchmarks/aoti_load.py [--device cuda]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

COMPILE = """
import sys, torch
device = sys.argv[2]
module = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.Tanh()).to(device).eval()
program = torch.export.export(module, (torch.randn(4, 16, device=device),))
torch._inductor.aoti_compile_and_package(program, package_path=sys.argv[1])
"""
LOAD = """
import sys, torch
device = sys.argv[2]
loaded = torch._inductor.aoti_load_package(sys.argv[1], device_index=int(sys.argv[3]))
print("output shape", tuple(loaded(torch.randn(4, 16, device=device)).shape))
"""


def step(label: str, code: str, *args: str) -> int:
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-X", "faulthandler", "-c", code, *args], check=False, timeout=600)
    print(f"== {label}: exit {done.returncode} after {time.monotonic() - started:.1f} s", flush=True)
    return done.returncode


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cuda", help="cpu or cuda (default cuda)")
    device = parser.parse_args().device
    with tempfile.TemporaryDirectory() as folder:
        package = str(Path(folder) / "module.pt2")
        if status := step(f"compile on {device}", COMPILE, package, device):
            return status
        indices = ("-1",) if device == "cpu" else ("-1", "0")  # -1: the current device; a CPU has no other
        statuses = [
            step(f"load, device_index {index}, fresh interpreter", LOAD, package, device, index) for index in indices
        ]
    return next((status for status in statuses if status), 0)


if __name__ == "__main__":
    sys.exit(main())
