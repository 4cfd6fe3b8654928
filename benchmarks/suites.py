"""The cpu entry's suites end to end, cold, warm, after a one-case change and replayed; Markdown table out.

For each mode (the container, `nox -s test-cpu`'s path; and `--local`), in one run, each measure taken
`--repeats` times (3 by default; the table gives the median and the range, and each ratio per repeat):
- cold: the entry's cache removed (the container's named volume, or `.torchyard/cache/cpu`): every
  program is lowered and compiled again;
- warm: the same run again: .pt2/.pte files come from the artifact cache, inductor from its own caches;
- one case changed: the built-in `uint8_image` case's normalisation mean edited, to another value each
  repeat (its keys change; a container also gets a source-only image rebuild), then restored;
- untrusted after warm: a `--trust=untrusted` run right after a warm one (a container: its own cache,
  seeded with a copy of the trusted one; `--local`: `--unsandboxed`, a copy in .torchyard/cache-untrusted);
- replayed: `--reuse-results` after a first such run, which hands back that run's verdicts.
Every run must exit 0 (the suites pass); the table gives seconds and ratios. Run from the repository root
with TORCHYARD_BASE_IMAGES=cpu=torchyard/base:bookworm: `python benchmarks/suites.py`.

`--in-place ENTRY` measures `torchyard test --in-place --entry ENTRY` alone, with the current interpreter
and its stack (a GPU machine that has one, with no Docker): cold is its cache `.torchyard/cache/ENTRY`
removed. `--suite NAME` (repeatable) runs only those suites, as `torchyard test --suite` does (a machine
without ExecuTorch or Torch-TensorRT has no runtime suite to run). `benchmarks/device.sh` runs this on a
lent GPU machine.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import docker
import docker.errors

from torchyard.trust import project_scope

REPO = Path(__file__).resolve().parents[1]
BUILTIN = REPO / "src" / "torchyard" / "inimage" / "cases" / "builtin.py"
ORIGINAL = 'register_buffer("mean", torch.tensor([0.485, 0.456, 0.406])'
CHANGED = 'register_buffer("mean", torch.tensor([0.5, 0.5, {blue}])'


FAILED: list[str] = []  # with --keep-going: each run that exited non-zero
KEEP_GOING = False


def timed(entry: str, *args: str) -> float:
    started = time.monotonic()
    command = [sys.executable, "-m", "torchyard", "test", "--entry", entry, *args]
    # an untrusted run keeps the trusted matrix.toml's policy: here the committed one is that
    env = {**os.environ, "TORCHYARD_TRUSTED_MATRIX": str(REPO / "matrix.toml")}
    completed = subprocess.run(command, cwd=REPO, env=env, check=False)
    # Each run's time as it ends: a run cut off by its caller's time limit keeps what it measured.
    print(f"- torchyard test {' '.join(args)}: exit {completed.returncode} after {time.monotonic() - started:.1f} s",
          flush=True)  # fmt: skip
    if completed.returncode != 0:
        failure = f"torchyard test --entry {entry} {' '.join(args)} exited {completed.returncode}"
        if not KEEP_GOING:
            raise SystemExit(failure)
        FAILED.append(failure)
    return time.monotonic() - started


def cold_cache(mode: str, entry: str) -> None:
    if mode in ("local", "in-place"):
        shutil.rmtree(REPO / ".torchyard" / "cache" / entry, ignore_errors=True)
        return
    scope = project_scope(REPO / "matrix.toml", os.environ)
    with contextlib.suppress(docker.errors.NotFound):
        docker.from_env().volumes.get(f"torchyard-cache-{scope}-{entry}").remove(force=True)


def measure(mode: str, entry: str, repeats: int, suites: list[str]) -> dict[str, list[float]]:
    """Each measure `repeats` times: cold, then warm, then one case changed (a different change each time,
    so each is a real change), then back; replayed last, once per repeat after a first replay."""
    flags = {"container": (), "local": ("--local",), "in-place": ("--in-place",)}[mode]
    flags += tuple(f"--suite={suite}" for suite in suites)
    if mode != "in-place":
        timed(entry, *flags)  # the image or venv exists and is current before anything is timed
    text = BUILTIN.read_text()
    assert ORIGINAL in text
    seconds: dict[str, list[float]] = {
        "cold": [], "warm": [], "untrusted after warm": [], "one case changed": [], "replayed": []
    }  # fmt: skip
    untrusted = ("--trust=untrusted", *(("--unsandboxed",) if mode != "container" else ()))
    try:
        for repeat in range(repeats):
            cold_cache(mode, entry)
            seconds["cold"].append(timed(entry, *flags))
            seconds["warm"].append(timed(entry, *flags))
            seconds["untrusted after warm"].append(timed(entry, *flags, *untrusted))
            BUILTIN.write_text(text.replace(ORIGINAL, CHANGED.format(blue=0.5 - repeat / 100)))
            seconds["one case changed"].append(timed(entry, *flags))
            BUILTIN.write_text(text)
    finally:
        BUILTIN.write_text(text)
    timed(entry, *flags, "--reuse-results")
    seconds["replayed"] = [timed(entry, *flags, "--reuse-results") for _ in range(repeats)]
    return seconds


def spread(values: list[float], unit: str, digits: int) -> str:
    """The median, and the range when there is more than one value."""
    median = statistics.median(values)
    if len(values) == 1:
        return f"{median:.{digits}f}{unit}"
    return f"{median:.{digits}f}{unit} ({min(values):.{digits}f}-{max(values):.{digits}f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3, help="times each measure is taken (default 3)")
    parser.add_argument("--in-place", metavar="ENTRY", help="measure only `--in-place` runs of this entry")
    parser.add_argument("--suite", action="append", default=[], help="run only this suite (repeatable)")
    parser.add_argument(
        "--keep-going", action="store_true", help="time runs that fail too, and list them (a first look at a machine)"
    )
    options = parser.parse_args()
    os.environ.setdefault("TORCHYARD_TRUSTED_MATRIX", str(REPO / "matrix.toml"))  # an untrusted build's bases
    global KEEP_GOING  # noqa: PLW0603 (the one switch, read by `timed`)
    KEEP_GOING = options.keep_going
    repeats = options.repeats
    if repeats < 1:
        parser.error(f"--repeats must be 1 or more, not {repeats}")
    rows = []
    modes = [("in-place", options.in_place)] if options.in_place else [("container", "cpu"), ("local", "cpu")]
    for mode, entry in modes:
        seconds = measure(mode, entry, repeats, options.suite)
        rows += [(f"{mode}: {name}", spread(values, " s", 1)) for name, values in seconds.items()]
        pairs = list(zip(seconds["cold"], seconds["warm"], seconds["one case changed"], strict=True))
        rows += [
            (f"{mode}: cold / warm", spread([cold / warm for cold, warm, _ in pairs], "x", 2)),
            (
                f"{mode}: untrusted after warm / warm",
                spread([u / w for u, w in zip(seconds["untrusted after warm"], seconds["warm"], strict=True)], "x", 2),
            ),
            (f"{mode}: one case changed / warm", spread([one / warm for _, warm, one in pairs], "x", 2)),
            (
                f"{mode}: cold / replayed",
                f"{statistics.median(seconds['cold']) / statistics.median(seconds['replayed']):.1f}x",
            ),
        ]
    print(f"\n{repeats} of each; median (range); ratios per repeat (cold, warm and one case taken together)")
    print("\n| measure | value |\n|---|---|")
    for measure_name, value in rows:
        print(f"| {measure_name} | {value} |")
    if FAILED:
        print("\nruns that failed (their times are in the table):\n" + "\n".join(f"- {line}" for line in FAILED))
        raise SystemExit(1)


if __name__ == "__main__":
    main()
