"""The cpu entry's suites end to end, cold, warm, after a one-case change and replayed; Markdown table out.

For each mode (the container, `nox -s test-cpu`'s path; and `--local`), in one run:
- cold: the entry's cache removed (the container's named volume, or `.torchyard/cache/cpu`): every
  program is lowered and compiled again;
- warm: the same run again: .pt2/.pte files come from the artifact cache, inductor from its own caches;
- one case changed: the built-in `uint8_image` case's normalisation mean edited (its key changes; a
  container also gets a source-only image rebuild), then restored;
- replayed: `--reuse-results` twice; the second hands back the first's verdicts.
Every run must exit 0 (the suites pass); the table gives seconds and ratios. Run from the repository root
with TORCHYARD_BASE_IMAGES=cpu=torchyard/base:bookworm: `python benchmarks/suites.py`.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import sys
import time
from pathlib import Path

import docker
import docker.errors

REPO = Path(__file__).resolve().parents[1]
BUILTIN = REPO / "src" / "torchyard" / "inimage" / "cases" / "builtin.py"
ORIGINAL = 'register_buffer("mean", torch.tensor([0.485, 0.456, 0.406])'
CHANGED = 'register_buffer("mean", torch.tensor([0.5, 0.5, 0.5])'


def timed(*args: str) -> float:
    started = time.monotonic()
    command = [sys.executable, "-m", "torchyard", "test", "--entry", "cpu", *args]
    completed = subprocess.run(command, cwd=REPO, check=False)
    if completed.returncode != 0:
        raise SystemExit(f"torchyard test {' '.join(args)} exited {completed.returncode}")
    return time.monotonic() - started


def cold_cache(mode: str) -> None:
    if mode == "local":
        shutil.rmtree(REPO / ".torchyard" / "cache" / "cpu", ignore_errors=True)
        return
    with contextlib.suppress(docker.errors.NotFound):
        docker.from_env().volumes.get("torchyard-inductor-cpu").remove(force=True)


def measure(mode: str) -> dict[str, float]:
    flags = ("--local",) if mode == "local" else ()
    timed(*flags)  # the image or venv exists and is current before anything is timed
    cold_cache(mode)
    seconds = {"cold": timed(*flags), "warm": timed(*flags)}
    text = BUILTIN.read_text()
    assert ORIGINAL in text
    try:
        BUILTIN.write_text(text.replace(ORIGINAL, CHANGED))
        seconds["one case changed"] = timed(*flags)
    finally:
        BUILTIN.write_text(text)
    timed(*flags, "--reuse-results")
    seconds["replayed"] = timed(*flags, "--reuse-results")
    return seconds


def main() -> None:
    rows = []
    for mode in ("container", "local"):
        seconds = measure(mode)
        rows += [(f"{mode}: {name}", f"{value:.1f} s") for name, value in seconds.items()]
        rows += [
            (f"{mode}: cold / warm", f"{seconds['cold'] / seconds['warm']:.2f}x"),
            (f"{mode}: one case changed / warm", f"{seconds['one case changed'] / seconds['warm']:.2f}x"),
            (f"{mode}: cold / replayed", f"{seconds['cold'] / seconds['replayed']:.1f}x"),
        ]
    print("\n| measure | value |\n|---|---|")
    for measure_name, value in rows:
        print(f"| {measure_name} | {value} |")


if __name__ == "__main__":
    main()
