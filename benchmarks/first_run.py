"""This repository's first `nox -s test-cpu` from a fresh clone on an emptied engine, as a newcomer runs it:
`nox -s base-image` (a base made with mmdebstrap or debootstrap, where a laptop pulls one), then `nox -s
test-cpu` (the images of the cpu and cpu-bf16 entries, then each entry's suites). Prints each phase and the
total against the goal of three minutes, as a Markdown table.

It removes every container, image, volume and build cache of the engine first: run it only on an engine that
holds nothing you keep, with `--empty-the-engine`. TORCHYARD_FIND_LINKS names where wheels lie on disk,
TORCHYARD_TEST_CPU_WHEELS where PyTorch's CPU index is not reachable (its wheels there served as a local index).
`python benchmarks/first_run.py --empty-the-engine`
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import docker

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.cpu_index import mirrored

REPO = Path(__file__).resolve().parents[1]
GOAL_S = 180.0
IMAGE_ROW = re.compile(r"^\| (\S+) +\| torchyard/\S+ +\| [\d.]+ GB +\| ([\d.]+) +\|", re.MULTILINE)
SESSION = re.compile(r"^=+ .*\bin ([\d.]+)s\b.*=+$", re.MULTILINE)


def empty(client: docker.DockerClient) -> None:
    for container in client.containers.list(all=True):
        container.remove(force=True)
    for image in client.images.list():
        client.images.remove(str(image.id), force=True)
    client.api.prune_builds(all=True)
    for volume in client.volumes.list():
        volume.remove(force=True)


def timed(args: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, str]:
    started = time.perf_counter()
    done = subprocess.run(args, cwd=cwd, env=env, check=True, capture_output=True, text=True)
    return time.perf_counter() - started, done.stdout + done.stderr


def main() -> int:
    if "--empty-the-engine" not in sys.argv:
        print("this removes everything the engine holds: pass --empty-the-engine", file=sys.stderr)
        return 2
    client = docker.from_env()
    empty(client)
    env = {key: value for key, value in os.environ.items() if key not in {"TORCHYARD_BASE_IMAGES", "TORCHYARD_MIRRORS"}}
    with tempfile.TemporaryDirectory(prefix="torchyard-first-run-") as scratch:
        env = mirrored(env, Path(scratch) / "pytorch-cpu")
        clone = Path(scratch) / "torchyard"
        subprocess.run(["git", "clone", "--quiet", str(REPO), str(clone)], check=True)
        base_s, _ = timed(["nox", "-s", "base-image"], clone, env)
        env["TORCHYARD_BASE_IMAGES"] = "cpu=torchyard/base:bookworm"
        test_s, output = timed(["nox", "-s", "test-cpu"], clone, env)
        # What each entry proved and left out: the second entry of a stack leaves out what the first proved.
        proofs = {
            folder.name: next((line for line in md.read_text().splitlines() if line.startswith("Harness")), "")
            for folder in sorted((clone / "reports").iterdir())
            if (md := folder / "parity.md").is_file()
        }
    images = {entry: float(seconds) for entry, seconds in IMAGE_ROW.findall(output)}
    sessions = [float(seconds) for seconds in SESSION.findall(output)]
    tool = "mmdebstrap" if shutil.which("mmdebstrap") else "debootstrap"
    rows = [(f"base ({tool})", base_s), *((f"image {entry}", s) for entry, s in images.items())]
    rows += [(f"suites {entry}", s) for entry, s in zip(images, sessions, strict=False)]
    rows += [("rest of test-cpu (nox venv, lock check, containers)", test_s - sum(images.values()) - sum(sessions))]
    total = base_s + test_s
    print("| phase | seconds |\n|---|---|")
    for name, seconds in rows:
        print(f"| {name} | {seconds:.1f} |")
    print(f"| **total** | **{total:.1f}** ({total / GOAL_S:.2f}x the three-minute goal) |")
    for entry, line in proofs.items():
        print(f"{entry}: {line}")
    empty(client)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
