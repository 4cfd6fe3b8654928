"""Image and suite benchmarks on the real engine, side by side in one run; prints a Markdown table.

- no-op rebuild: `torchyard build cpu` when the image exists, and a full `docker build` of the same
  plan with every layer cached;
- a source-only change: torchyard's Dockerfile (dependencies keyed by the lock) against a naive one
  (`COPY . .` then install) on the same change;
- image size against the naive image and against the installed payload (the venv).

The suites' cold and warm runs are `benchmarks/suites.py`'s, through `torchyard test` itself.

Run from the repository root with TORCHYARD_BASE_IMAGES=cpu=torchyard/base:bookworm (and
TORCHYARD_FIND_LINKS where wheels lie on disk): `python benchmarks/images.py`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import docker

from torchyard.image import context as image_context
from torchyard.image import plan as image_plan
from torchyard.image.plan import BuildOptions
from torchyard.matrix import load_plan
from torchyard.matrix.machine import load_machine
from torchyard.pipeline import build_images

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.integration.conftest import PROJECT, copy_tree

REPO = Path(__file__).resolve().parents[1]
NAIVE = """\
FROM {base}
RUN apt-get update && apt-get install -y --no-install-recommends g++ python3.11-dev \\
    && rm -rf /var/lib/apt/lists/*
COPY . /app
WORKDIR /app
RUN --mount=type=secret,id=cacert python3 -m venv /venv \\
    && /venv/bin/pip install --cert /run/secrets/cacert uv==0.13.9 \\
    && SSL_CERT_FILE=/run/secrets/cacert UV_NATIVE_TLS=1 /venv/bin/uv pip install --python /venv/bin/python \\
       --require-hashes --no-deps {find_links} -r lockfiles/cpu.txt
"""


def seconds(function: object) -> float:
    started = time.perf_counter()
    function()  # type: ignore[operator]
    return time.perf_counter() - started


def naive_build(tree: Path, tag: str) -> None:
    folders = os.environ.get("TORCHYARD_FIND_LINKS", "").split()
    servers = []
    links = ""
    for position, folder in enumerate(folders):
        port = 18900 + position
        servers.append(
            subprocess.Popen(
                [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1", "-d", folder],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )
        links += f" --find-links http://127.0.0.1:{port}/"
    time.sleep(1)
    (tree / "Dockerfile.naive").write_text(
        NAIVE.format(base=os.environ["TORCHYARD_BASE_IMAGES"].split("=", 1)[1], find_links=links)
    )
    try:
        subprocess.run(
            ["/usr/bin/docker", "build", "--network", "host", "-f", "Dockerfile.naive", "--secret",
             "id=cacert,src=/etc/ssl/certs/ca-certificates.crt", "-t", tag, "."],
            cwd=tree, check=True, env={**os.environ, "DOCKER_BUILDKIT": "1"},
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
    finally:
        for server in servers:
            server.terminate()


def main() -> int:
    client = docker.from_env()
    entry = load_plan(REPO / "matrix.toml").entry("cpu")
    machine = load_machine(os.environ)
    rows: list[tuple[str, str]] = []
    with tempfile.TemporaryDirectory() as scratch:
        tree = copy_tree(Path(scratch) / "tree")
        shutil.copytree(REPO / "src", tree / "src")
        changed = tree / "src" / "torchyard" / "inimage" / "changed.py"
        changed.write_text("# a source file\n")
        shipped = image_context.inimage_files()
        setattr(image_plan, "inimage_files", lambda: (*shipped, ("torchyard/inimage/changed.py", changed)))  # noqa: B010
        os.chdir(tree)

        def build() -> None:
            build_images([entry], Path("lockfiles"), BuildOptions(), project=PROJECT, machine=machine)

        (built,) = build_images([entry], Path("lockfiles"), BuildOptions(), project=PROJECT, machine=machine)
        rows.append(("no-op rebuild, `torchyard build cpu` (image exists)", f"{seconds(build):.1f} s"))
        naive_build(tree, "torchyard-bench/naive:1")
        changed.write_text("# a source-only change\n")
        ours = seconds(build)
        naive = seconds(lambda: naive_build(tree, "torchyard-bench/naive:2"))
        rows.append(("rebuild after a source-only change, torchyard", f"{ours:.1f} s"))
        rows.append(("rebuild after the same change, naive `COPY . .` then install", f"{naive:.1f} s"))
        rows.append(("ratio naive / torchyard", f"{naive / ours:.1f}x"))
        ours_size = client.images.get(built.tag).attrs["Size"]
        naive_size = client.images.get("torchyard-bench/naive:2").attrs["Size"]
        payload = client.containers.run(
            built.tag, ["-c", "du -sb /opt/torchyard/venv | cut -f1"], entrypoint=["/bin/sh"], remove=True
        )
        rows.append(("image size, torchyard", f"{ours_size / 1e9:.2f} GB"))
        rows.append(("image size, naive", f"{naive_size / 1e9:.2f} GB"))
        rows.append(("installed payload (the venv)", f"{int(bytes(payload).decode()) / 1e9:.2f} GB"))
        rows.append(("ratio torchyard image / payload", f"{ours_size / int(bytes(payload).decode()):.2f}x"))
        for tag in ("torchyard-bench/naive:1", "torchyard-bench/naive:2"):
            client.images.remove(tag, force=True)
    print("| measure | value |\n|---|---|")
    for name, value in rows:
        print(f"| {name} | {value} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
