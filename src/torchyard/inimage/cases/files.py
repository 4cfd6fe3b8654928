"""A case's example inputs from files in the project: the batches its model really sees, beside or instead of
random ones. A file is one batch: tensors saved with `torch.save` (a tuple or list: positional inputs; a
dict: keyword inputs; nested as the model takes them) or with safetensors (a flat dict: keyword inputs,
`observation.camera` nested as `{"observation": {"camera": ...}}`).

The files are inputs, never code: `torch.load(weights_only=True)` (no pickled object but tensors and plain
containers), bounded in size before anything is read, and every tensor checked against the case's declared
shapes and dtypes; anything else is the case's inputs failing, in one line naming the file.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

MAX_BYTES = 256 << 20


class InputFileError(ValueError):
    """A batch file that is not what the case declares."""


@dataclass(frozen=True)
class InputFiles:
    """Batches in files (`paths`, each one call of the model), checked against `shapes`: each input tensor's
    dotted path (`observation.camera`, `0` for the first positional input) -> its dtype and shape (`None` in a
    shape: any size there, as a batch dimension). Every tensor a file holds must be declared, and every
    declared one present."""

    paths: Sequence[Path | str]
    shapes: Mapping[str, tuple[torch.dtype, tuple[int | None, ...]]]
    max_bytes: int = MAX_BYTES
    labels: tuple[str, ...] = field(init=False, default=())

    def __post_init__(self) -> None:
        if not self.paths:
            raise ValueError("InputFiles: no paths")
        for name, declared in self.shapes.items():
            if not (isinstance(declared, tuple) and len(declared) == 2 and isinstance(declared[0], torch.dtype)):
                raise ValueError(
                    f"InputFiles: shapes[{name!r}] must be (dtype, shape), such as (torch.uint8, (None, 3))"
                )
        object.__setattr__(self, "labels", tuple(Path(path).name for path in self.paths))

    def batches(self) -> list[Any]:
        """Each file's batch, checked: a tuple (positional inputs) or a dict (keyword inputs)."""
        return [self._batch(Path(path)) for path in self.paths]

    def _batch(self, path: Path) -> Any:
        try:
            size = path.stat().st_size
        except OSError as error:
            raise InputFileError(f"{path}: cannot be read ({error.strerror})") from None
        if size > self.max_bytes:
            raise InputFileError(f"{path}: {size} bytes, over the bound of {self.max_bytes} (InputFiles.max_bytes)")
        try:
            if path.suffix == ".safetensors":
                loaded: Any = _nest(_safetensors(path))
            else:
                loaded = torch.load(path, map_location="cpu", weights_only=True)
        except InputFileError:
            raise
        except Exception as error:  # whatever the loader raises, it is this file's
            first = str(error).strip().splitlines()[0] if str(error).strip() else ""
            raise InputFileError(f"{path}: not a batch of tensors ({type(error).__name__}: {first})") from None
        if isinstance(loaded, list):
            loaded = tuple(loaded)
        if not isinstance(loaded, tuple | dict):
            raise InputFileError(f"{path}: holds a {type(loaded).__name__}; a batch is a tuple, list or dict")
        try:
            found = dict(_tensors(loaded))
        except InputFileError as error:
            raise InputFileError(f"{path}: {error}") from None
        if not found:
            raise InputFileError(f"{path}: holds no tensor")
        for name, tensor in found.items():
            if name not in self.shapes:
                raise InputFileError(f"{path}: input {name!r} is not declared in InputFiles.shapes")
            dtype, shape = self.shapes[name]
            fits = len(shape) == tensor.dim() and all(
                want in (None, got) for want, got in zip(shape, tensor.shape, strict=True)
            )
            if tensor.dtype != dtype or not fits:
                raise InputFileError(
                    f"{path}: input {name!r} is {tensor.dtype} {tuple(tensor.shape)}; declared {dtype} {shape}"
                )
        missing = sorted(set(self.shapes) - set(found))
        if missing:
            raise InputFileError(f"{path}: declared inputs missing: {', '.join(missing)}")
        return loaded


def _safetensors(path: Path) -> dict[str, torch.Tensor]:
    """A safetensors file's tensors: the package is the project's to depend on, and its absence is one line."""
    try:
        module = importlib.import_module("safetensors.torch")
    except ImportError:
        raise InputFileError(
            f"{path}: safetensors is not installed: add it to the entry's requirements or the project's dependencies"
        ) from None
    loaded: dict[str, torch.Tensor] = module.load_file(str(path))
    return loaded


def _nest(flat: Mapping[str, torch.Tensor]) -> dict[str, Any]:
    """safetensors' flat names as nested dicts: `a.b` -> {"a": {"b": ...}}."""
    nested: dict[str, Any] = {}
    for name, tensor in flat.items():
        *parents, leaf = name.split(".")
        into = nested
        for parent in parents:
            into = into.setdefault(parent, {})
        into[leaf] = tensor
    return nested


def _tensors(tree: Any, prefix: str = "") -> Iterator[tuple[str, torch.Tensor]]:
    """Each tensor of a batch with its dotted path; what is neither a tensor nor a container is refused."""
    if isinstance(tree, torch.Tensor):
        yield prefix, tree
    elif isinstance(tree, dict):
        for key, value in tree.items():
            yield from _tensors(value, f"{prefix}.{key}" if prefix else str(key))
    elif isinstance(tree, list | tuple):
        for index, value in enumerate(tree):
            yield from _tensors(value, f"{prefix}.{index}" if prefix else str(index))
    elif not isinstance(tree, int | float | bool | str | type(None)):
        raise InputFileError(f"input {prefix or 'the batch'} is a {type(tree).__name__}, not a tensor")
