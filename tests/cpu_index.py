"""PyTorch's CPU index as this machine has it, for the tests, the workflows under act and the benchmarks: a
PEP 503 tree of the published CPU wheels found in a local folder. Stdlib only."""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Mapping
from pathlib import Path

# PyTorch's CPU index is not reachable here: its wheels that lie on this machine, checked against the sha256
# the index publishes (as recorded in asanderson/llm-redact, scripts/cpu_torch.py at b4efc9e, from
# https://download.pytorch.org/whl/cpu/torch/), never trusted for being on disk.
CPU_WHEELS = "TORCHYARD_TEST_CPU_WHEELS"  # the folder holding them (.ci/run sets it where there is one)
PUBLISHED_CPU_WHEELS = {
    "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl": (
        "6746dbcbeb526eb61330b76b41ff1b4eb848951103a892eeb080dfa2b264667b"
    ),
}
# The index marks each file's upload time (`data-upload-time`, pytorch/pytorch#178980), which `exclude-newer`
# needs; here torch 2.13.0's upload time on PyPI (its simple API), the CPU index's own not being reachable.
UPLOADED = "2026-07-08T16:04:07Z"


def write_cpu_index(folder: Path, root: Path) -> str:
    """PyTorch's CPU index as a PEP 503 tree (file://) under `root`, of the published wheels found in `folder`:
    an index, not a folder, so `first-index` takes torch from it alone, as it would from the real one."""
    found = {name: folder / name for name in PUBLISHED_CPU_WHEELS if (folder / name).is_file()}
    if not found:
        raise FileNotFoundError(f"no CPU-only torch wheel in {folder}: one of {', '.join(PUBLISHED_CPU_WHEELS)}")
    (root / "files").mkdir(parents=True)
    (root / "simple" / "torch").mkdir(parents=True)
    links = []
    for name, path in found.items():
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        if digest != PUBLISHED_CPU_WHEELS[name]:
            raise ValueError(f"{path}: not the wheel PyTorch's index publishes")
        shutil.copy(path, root / "files" / name)
        href = f"../../files/{name.replace('+', '%2B')}#sha256={digest}"
        links.append(f'<a href="{href}" data-upload-time="{UPLOADED}">{name}</a>')
    page = "<!DOCTYPE html><html><body>\n" + "\n".join(links) + "\n</body></html>\n"
    (root / "simple" / "torch" / "index.html").write_text(page)
    return f"file://{root / 'simple'}"


def mirrored(environ: Mapping[str, str], root: Path) -> dict[str, str]:
    """`environ` with PyTorch's CPU index served from `root` where `$TORCHYARD_TEST_CPU_WHEELS` names its wheels
    (unchanged where it is unset: the real index is reachable)."""
    if CPU_WHEELS not in environ:
        return dict(environ)
    index = write_cpu_index(Path(environ[CPU_WHEELS]), root)
    return {**environ, "TORCHYARD_MIRRORS": with_index(environ.get("TORCHYARD_MIRRORS", ""), index)}


def with_index(mirrors: str, index: str) -> str:
    """A `TORCHYARD_MIRRORS` value with `pytorch-cpu` served from `index` (the later pair wins)."""
    return f"{mirrors} pytorch-cpu={index}".strip()
