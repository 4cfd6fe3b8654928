"""Which torch an ExecuTorch release pairs with (`pairs.toml`, each row with its source): a lock that pairs a
known release with another torch is refused in one line, at lock time and before any image build."""

from __future__ import annotations

import functools
import tomllib
from collections.abc import Iterable, Mapping
from importlib import resources

from packaging.utils import canonicalize_name


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


def mismatched_pair(pins: Iterable[str]) -> str:
    """Why the pins (`name==version`) pair ExecuTorch with a torch it is not built for ("" where they do not:
    either is absent, as a vendor base's torch is, or the table does not know the release)."""
    versions: dict[str, str] = {}
    for pin in pins:
        name, separator, version = pin.partition("==")
        if separator:
            versions[str(canonicalize_name(name))] = version.strip()
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
