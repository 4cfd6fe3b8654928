"""Which torch an ExecuTorch release pairs with (`pairs.toml`, each row with its source), and which torch build a
companion built against torch's (torchvision, torchaudio: `contract.TORCH_COMPANIONS`) pairs with: a lock that
pairs either otherwise is refused in one line, at lock time and before any image build."""

from __future__ import annotations

import functools
import tomllib
from collections.abc import Iterable, Mapping
from importlib import resources

from packaging.utils import canonicalize_name

from torchyard.contract import TORCH_COMPANIONS, build_family


@functools.cache
def pairs() -> Mapping[str, tuple[str, str]]:
    """ExecuTorch series -> (the torch series it pairs with, the row's source)."""
    table = tomllib.loads(resources.files("torchyard.lock").joinpath("pairs.toml").read_text())
    return {row["executorch"]: (row["torch"], row["source"]) for row in table["pair"]}


def series(version: str) -> str:
    """`2.14.1+cpu` -> `2.14`."""
    return ".".join(version.split("+", 1)[0].split(".")[:2])


def torch_for(executorch_version: str) -> str | None:
    """The torch series an ExecuTorch version pairs with; None where the table does not know the release."""
    found = pairs().get(series(executorch_version))
    return found[0] if found else None


# PyPI's own builds of torch and its companions (no local tag) for Linux on x86-64 are CUDA builds; elsewhere
# (macOS, aarch64) what PyPI serves varies by release, so a missing tag says nothing there.
PYPI_CUDA_PLATFORMS = ("x86_64-manylinux", "x86_64-unknown-linux", "linux")
PYPI = "PyPI's build"


def _family(version: str, platform: str) -> str | None:
    tag = version.partition("+")[2]
    if tag:
        return build_family(tag)
    return PYPI if platform.startswith(PYPI_CUDA_PLATFORMS) else None


def mismatched_build(versions: Mapping[str, str], platform: str) -> str:
    """Why a companion is locked for another torch build than the torch beside it ("" where it is not, or
    where the tags say nothing comparable): PyPI's torchvision beside torch's CPU build fails at import
    (`operator torchvision::nms does not exist`), which the image check found only after the build."""
    torch = versions.get("torch")
    if torch is None:
        return ""
    family = _family(torch, platform)
    for name in TORCH_COMPANIONS:
        version = versions.get(name)
        theirs = None if version is None else _family(version, platform)
        if family is None or theirs is None or theirs == family:
            continue
        if PYPI in (family, theirs) and any(side.startswith("cu") for side in (family, theirs)):
            continue  # PyPI's CUDA version moves by release: the image check compares the installed builds
        where = "PyPI's build (for PyPI's torch: CUDA on Linux x86-64)" if theirs == PYPI else f"the +{theirs} build"
        wanted = "PyPI's" if family == PYPI else f"its +{torch.partition('+')[2]}"
        return (
            f"{name} {version} is {where}, and the lock pairs it with torch {torch}: it fails at import; take "
            f"{name} from the index torch comes from ({wanted} build)"
        )
    return ""


def mismatched_pair(pins: Iterable[str], platform: str = "") -> str:
    """Why the pins (`name==version`) pair ExecuTorch with a torch it is not built for, or a companion with
    another torch build (`mismatched_build`; `platform`: the lock's, as uv's `--python-platform`) ("" where
    they do not: either is absent, as a vendor base's torch is, or nothing says which they pair with)."""
    versions: dict[str, str] = {}
    for pin in pins:
        name, separator, version = pin.partition("==")
        if separator:
            versions[str(canonicalize_name(name))] = version.strip()
    built = mismatched_build(versions, platform)
    if built:
        return built
    executorch, torch = versions.get("executorch"), versions.get("torch")
    if executorch is None or torch is None:
        return ""
    wanted = torch_for(executorch)
    if wanted is None or series(torch) == wanted:
        return ""
    source = pairs()[series(executorch)][1]
    return (
        f"executorch {executorch} is built for torch {wanted}.*, and the lock pairs it with torch {torch}: pin the "
        f"executorch release of torch {series(torch)} (or torch=={wanted}.*) in the entry's requirements "
        f"(source: {source})"
    )
