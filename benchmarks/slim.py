"""A newcomer's first run, side by side in one run: the matrix `torchyard init` writes (torch's CPU build from
PyTorch's CPU index) against the same matrix on PyPI alone (PyPI's Linux torch, the CUDA build), for
`examples/robot-policy`. Per variant: the lock, the first `torchyard test` (image built on an engine that has
only the base, then the suites), the image's size and what torch it holds; then a source-only change: the
rebuild (`torchyard build cpu`, the project's wheel built again in its sealed container) and the test after
it (warm). Prints a Markdown table.

Run from the repository root with TORCHYARD_BASE_IMAGES=cpu=torchyard/base:bookworm, TORCHYARD_FIND_LINKS
where wheels lie on disk, and TORCHYARD_TEST_CPU_WHEELS where PyTorch's CPU index is not reachable (its
wheels there are served as a local index, each checked against the published hash):
`python benchmarks/slim.py`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import docker

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.cpu_index import mirrored

REPO = Path(__file__).resolve().parents[1]
PYPI_ONLY = ('indexes = ["pytorch-cpu", "pypi"]', 'indexes = ["pypi"]')


def timed(args: list[str], cwd: Path, env: dict[str, str]) -> float:
    started = time.perf_counter()
    subprocess.run(args, cwd=cwd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - started


def variant(name: str, root: Path, env: dict[str, str], client: docker.DockerClient) -> dict[str, str]:
    project = root / name
    shutil.copytree(REPO / "examples" / "robot-policy", project)
    subprocess.run(["git", "init", "--quiet"], cwd=project, check=True)
    subprocess.run([sys.executable, "-m", "torchyard", "init"], cwd=project, env=env, check=True, capture_output=True)
    matrix = project / "matrix.toml"
    if name == "pypi":
        matrix.write_text(matrix.read_text().replace(*PYPI_ONLY))
    subprocess.run(["git", "add", "--all"], cwd=project, check=True)
    lock = timed([sys.executable, "-m", "torchyard", "lock"], project, env)
    first = timed([sys.executable, "-m", "torchyard", "test", "--entry", "cpu"], project, env)
    (image,) = {
        image.id: image for image in client.images.list(filters={"label": "dev.torchyard.project=robopolicy"})
    }.values()
    torch = client.containers.run(
        image, ["-c", "import torch; print(torch.__version__)"], entrypoint=["/opt/torchyard/venv/bin/python"],
        remove=True,
    )  # fmt: skip
    # A source-only change (unique, so no earlier build has it cached): the project's wheel is built again
    # in its sealed container and only the layers above the dependencies are rebuilt; then the suites again.
    policy = project / "src" / "robopolicy" / "policy.py"
    policy.write_text(policy.read_text() + f"\n# a source-only change {uuid.uuid4()}\n")
    rebuild = timed([sys.executable, "-m", "torchyard", "build", "cpu"], project, env)
    second = timed([sys.executable, "-m", "torchyard", "test", "--entry", "cpu"], project, env)
    row = {
        "torch": bytes(torch).decode().strip(),
        "lock": f"{lock:.1f} s",
        "first test": f"{first:.1f} s",
        "size": f"{image.attrs['Size'] / 1e9:.2f} GB",
        "source-only rebuild": f"{rebuild:.1f} s",
        "test after it": f"{second:.1f} s",
    }
    for built in client.images.list(filters={"label": "dev.torchyard.project=robopolicy"}):
        client.images.remove(str(built.id), force=True)
    return row


def main() -> int:
    client = docker.from_env()
    if client.images.list(filters={"label": "dev.torchyard.project=robopolicy"}):
        print("remove the robopolicy images first: the first run must build its image", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        # 2026-11-28, this repository's cut-off
        env = {**mirrored(os.environ, root / "pytorch-cpu"), "SOURCE_DATE_EPOCH": "1795824000"}
        # A newcomer's engine: the base, no dependency image and no BuildKit cache from earlier builds.
        for cached in client.images.list(name="torchyard/dependencies"):
            client.images.remove(str(cached.id), force=True)
        client.api.prune_builds()
        rows = {name: variant(name, root, env, client) for name in ("init", "pypi")}
    print("| measure | init's matrix (PyTorch's CPU index) | PyPI only | ratio |")
    print("|---|---|---|---|")
    for measure in ("torch", "lock", "first test", "size", "source-only rebuild", "test after it"):
        slim, fat = rows["init"][measure], rows["pypi"][measure]
        ratio = f"{float(fat.split()[0]) / float(slim.split()[0]):.2f}x" if measure != "torch" else ""
        print(f"| {measure} | {slim} | {fat} | {ratio} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
