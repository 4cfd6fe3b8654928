"""Lowered programs cached by content: `.pt2`, `.pte` and Torch-TensorRT's `.ep` files keyed by everything
that decides them.

The key is a sha256 over:
- the backend and its options;
- the installed versions of every backend's distributions (`names.BACKEND_FACTS`: torch, executorch,
  torchao, torch-tensorrt, tensorrt) and numpy's;
- the device (type, name, compute capability, driver) and the dtype;
- the case's name, its dynamic shapes, and the first call's input tree (structure, shapes, dtypes, and
  the values of leaves that are not tensors);
- the module's weights and buffers, byte for byte;
- the module's code: each class's source, and the module-level functions, classes and constants its
  methods name, followed transitively. Code from packages whose version is in the key (torch and the
  others above, the standard library) counts by that version.

Code whose source cannot be read gives no key: that case is never cached. A hit copies the cached file
into the run's folder, and the backend loads it, runs it and compares it like a fresh one: a cache can
only save the lowering, never a comparison. A miss lowers and stores. Every write goes to a temporary
file in the cache folder and then a rename (`util.atomic`, without fsync: the digest finds a torn
entry), so concurrent writers of one key leave one whole file.
Each entry has a JSON sidecar with the artifact's sha256; an entry whose bytes do not match is corrupt:
it is removed and rebuilt.

A lowering that fails with the case's declared known failure (ExecuTorch's verifier rejecting a
program, say) is recorded too: a sidecar with the error's class names, message and one-line description
(and the sha256 of those), no artifact. A later run with the same key and the same known failure
declared raises it again (`RecordedFailure`) instead of lowering again to fail again; the suites judge it
as they judge a fresh one. Any other failure is never recorded, and a record is used only while the
case still declares a known failure that matches it: remove the declaration and the program is lowered
afresh.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import importlib.metadata
import inspect
import json
import platform
import sys
import types
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch
from torch.utils import _pytree as pytree

from torchyard import contract
from torchyard.inimage.cases import KnownFailure
from torchyard.inimage.parity.errors import RecordedFailure, describe_error, error_types
from torchyard.names import BACKEND_DISTRIBUTIONS, module_name
from torchyard.util.atomic import replace_atomically

DISTRIBUTIONS = (*BACKEND_DISTRIBUTIONS, "numpy")
VERSIONED = tuple(module_name(name) for name in DISTRIBUTIONS)  # their top-level modules
SIMPLE = (int, float, str, bool, bytes, type(None))
FORMAT = 1


class Unkeyable(Exception):
    """The module's code cannot be read (defined interactively, say): it is not cached."""


def versions() -> dict[str, str | None]:
    found: dict[str, str | None] = {}
    for name in DISTRIBUTIONS:
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            found[name] = None
    return found


def _nvidia_driver() -> str | None:
    try:
        return Path("/proc/driver/nvidia/version").read_text().splitlines()[0].strip()
    except (OSError, IndexError):
        return None


def _cpu_model() -> str:
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return platform.processor()
    return next((line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")), "")


def device_identity(device: torch.device) -> dict[str, Any]:
    """What the device is, as far as a lowered program can depend on it."""
    identity: dict[str, Any] = {"type": device.type, "machine": platform.machine()}
    if device.type == "cpu":
        identity["processor"] = _cpu_model()
    elif device.type == "cuda" and torch.cuda.is_available():
        index = device.index or 0
        identity |= {
            "name": torch.cuda.get_device_name(index),
            "capability": list(torch.cuda.get_device_capability(index)),
            "cuda": torch.version.cuda,
            "hip": torch.version.hip,
            "driver": _nvidia_driver(),
        }
    elif device.type == "xpu" and torch.xpu.is_available():
        identity |= {"name": torch.xpu.get_device_name(device.index or 0)}
    return identity


def _versioned(module_name: str) -> bool:
    """Code whose version is already in the key: the packages above and the standard library."""
    top = module_name.split(".", maxsplit=1)[0]
    return top in VERSIONED or top in sys.stdlib_module_names or top in {"builtins", "__future__", ""}


class _CodeWalk:
    """The sources a module's behaviour depends on, found from its classes through the globals they name."""

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.seen: set[int] = set()

    def add(self, obj: object) -> None:
        if id(obj) in self.seen:
            return
        self.seen.add(id(obj))
        if isinstance(obj, type):
            self._class(obj)
        elif isinstance(obj, types.FunctionType):
            self._function(obj)
        elif isinstance(obj, types.ModuleType):
            if not _versioned(obj.__name__):
                self.parts.append(f"module {obj.__name__}\0{_source(obj)}")
        elif isinstance(obj, SIMPLE) or (
            isinstance(obj, tuple | frozenset) and all(isinstance(v, SIMPLE) for v in obj)
        ):
            self.parts.append(repr(obj))
        elif isinstance(obj, torch.Tensor):
            self.parts.append(tensor_digest(obj))

    def _class(self, klass: type) -> None:
        if _versioned(klass.__module__):
            self.parts.append(f"{klass.__module__}.{klass.__qualname__}")
            return
        self.parts.append(f"class {klass.__qualname__}\0{_source(klass)}")
        for base in klass.__mro__[1:]:
            self.add(base)
        for value in vars(klass).values():
            function = getattr(value, "__func__", value)  # staticmethod, classmethod
            if isinstance(value, property):
                for accessor in (value.fget, value.fset):
                    if accessor is not None:
                        self.add(accessor)
            elif isinstance(function, types.FunctionType):
                self._names(function)

    def _function(self, function: types.FunctionType) -> None:
        if _versioned(function.__module__ or ""):
            self.parts.append(f"{function.__module__}.{function.__qualname__}")
            return
        self.parts.append(f"function {function.__qualname__}\0{_source(function)}")
        self._names(function)

    def _names(self, function: types.FunctionType) -> None:
        """Every global the function's code (nested code included) names, and its closure's cells."""
        codes = [function.__code__]
        while codes:
            code = codes.pop()
            codes += [const for const in code.co_consts if isinstance(const, types.CodeType)]
            for name in code.co_names:  # attribute names (`x.view`) are here too; only globals resolve
                if name in function.__globals__:
                    self.add(function.__globals__[name])
        for cell in function.__closure__ or ():
            try:
                self.add(cell.cell_contents)
            except ValueError:  # an empty cell
                continue


@functools.cache  # a class's source is found by parsing its whole file: once a run, not once a backend
def _source(obj: Any) -> str:
    try:
        return inspect.getsource(obj)
    except (OSError, TypeError) as error:
        raise Unkeyable(f"no source for {getattr(obj, '__qualname__', obj)!r}") from error


def tensor_digest(tensor: torch.Tensor) -> str:
    """sha256 of a tensor's dtype, shape and bytes (read straight from memory: numpy is not required)."""
    data = tensor.detach().to("cpu").contiguous()
    digest = hashlib.sha256(f"{data.dtype}{tuple(tensor.shape)}".encode())
    if data.numel():
        digest.update(ctypes.string_at(data.data_ptr(), data.numel() * data.element_size()))
    return digest.hexdigest()


def _input_spec(call_args: object) -> list[Any]:
    flat, spec = pytree.tree_flatten(call_args)
    described: list[Any] = [str(spec)]
    for leaf in flat:
        if isinstance(leaf, torch.Tensor):
            described.append([str(leaf.dtype), list(leaf.shape), leaf.is_contiguous(), leaf.stride()])
        else:
            described.append(repr(leaf))
    return described


def artifact_key(
    *,
    case_name: str,
    backend: str,
    options: dict[str, Any],
    module: torch.nn.Module,
    inputs: object,
    dynamic_shapes: object,
    device: torch.device,
    dtype: torch.dtype,
) -> str:
    """The content key of one lowering; raises `Unkeyable` when the module's code cannot be read."""
    walk = _CodeWalk()
    for klass in dict.fromkeys(type(sub) for sub in module.modules()):
        walk.add(klass)
    weights = [(name, tensor_digest(value)) for name, value in module.state_dict(keep_vars=False).items()]
    document = {
        "format": FORMAT,
        "case": case_name,
        "backend": backend,
        "options": options,
        "versions": versions(),
        "python": platform.python_version(),
        "device": device_identity(device),
        "dtype": str(dtype),
        "inputs": _input_spec(inputs),
        "dynamic-shapes": repr(dynamic_shapes),
        "weights": weights,
        "code": hashlib.sha256("\0\0".join(walk.parts).encode()).hexdigest(),
    }
    return hashlib.sha256(json.dumps(document, sort_keys=True, default=str).encode()).hexdigest()


def file_digest(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def entry_cache(env: Mapping[str, str], root: Path | None) -> ArtifactCache:
    """The entry's artifact cache, `artifacts/` under its cache `root`; none where there is no root, or where
    the run turned the artifact cache off."""
    if root is None or env.get(contract.ARTIFACT_CACHE) == "off":
        return ArtifactCache(None)
    return ArtifactCache(root / "artifacts")


class ArtifactCache:
    """A folder of `<key><suffix>` files with `<key>.json` sidecars; `root=None` turns caching off."""

    def __init__(self, root: Path | None) -> None:
        self.root = root
        self.rebuilt: set[str] = set()  # keys whose entry was corrupt in this process

    def lookup(self, key: str, suffix: str, target: Path) -> dict[str, Any] | None:
        """Copy the entry's artifact to `target` and return its sidecar's fields, or None on a miss. The
        digest is taken of exactly the bytes copied: a corrupt entry (or one a concurrent writer replaced
        between the sidecar and the file) is removed and reported as a miss, never used."""
        if self.root is None:
            return None
        artifact, sidecar = self.root / f"{key}{suffix}", self.root / f"{key}.json"
        try:
            meta = json.loads(sidecar.read_text())
            if "failure" in meta:  # a recorded known failure: no artifact, its fields are what is checked
                if _failure_digest(meta["failure"]) == meta["sha256"]:
                    return dict(meta)
                raise ValueError("a failure record whose fields do not match its digest")
            with artifact.open("rb") as source, target.open("wb") as copy:
                copied = _copy_hashing(source, copy)
            if copied == meta["sha256"]:
                return dict(meta)
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError):
            pass  # an unreadable sidecar is as corrupt as a digest mismatch
        target.unlink(missing_ok=True)
        self.rebuilt.add(key)
        for path in (artifact, sidecar):
            path.unlink(missing_ok=True)
        return None

    def store(self, key: str, suffix: str, source: Path, meta: dict[str, Any]) -> None:
        """Copy `source` in under `key`, atomically; the sidecar (written last) makes the entry whole."""
        if self.root is None:
            return
        self.root.mkdir(parents=True, exist_ok=True)
        with source.open("rb") as data:  # read once: the digest is of exactly the bytes stored
            digest = replace_atomically(
                self.root / f"{key}{suffix}", lambda handle: _copy_hashing(data, handle), durable=False
            )
        sidecar = json.dumps({**meta, "sha256": digest, "suffix": suffix}, sort_keys=True).encode()
        replace_atomically(self.root / f"{key}.json", lambda handle: handle.write(sidecar), durable=False)

    def store_failure(self, key: str, suffix: str, error: BaseException) -> None:
        """Record that lowering under `key` failed with `error` (a sidecar alone, written atomically)."""
        if self.root is None:
            return
        self.root.mkdir(parents=True, exist_ok=True)
        failure = {"types": error_types(error), "message": str(error), "description": describe_error(error)}
        record = {"failure": failure, "sha256": _failure_digest(failure), "suffix": suffix}
        replace_atomically(
            self.root / f"{key}.json",
            lambda handle: handle.write(json.dumps(record, sort_keys=True).encode()),
            durable=False,
        )
        (self.root / f"{key}{suffix}").unlink(missing_ok=True)  # an older artifact under this key is stale

    def materialize(
        self,
        key: str | None,
        suffix: str,
        target: Path,
        build: Callable[[Path], dict[str, Any]],
        *,
        known: KnownFailure | None = None,
    ) -> tuple[dict[str, Any], str]:
        """Make `target` hold the artifact: copied from the cache on a hit, else written by `build(target)`
        (which returns the sidecar's fields) and stored. Returns the fields and what the cache did:
        "hit", "miss", "rebuilt" (a corrupt entry was replaced), "off" or "unkeyable".

        `known` is the case's known failure on this backend: a build that fails with it is recorded, and a
        record that it still matches is raised again as a `RecordedFailure`."""
        if key is None or self.root is None:
            return build(target), "off" if self.root is None else "unkeyable"
        hit = self.lookup(key, suffix, target)
        if hit is not None and "failure" not in hit:
            return hit, "hit"
        if hit is not None and known is not None and known.matches(hit["failure"]["types"], hit["failure"]["message"]):
            raise RecordedFailure(**hit["failure"])
        try:
            meta = build(target)
        except Exception as error:
            if known is not None and known.matches(error_types(error), str(error)):
                self.store_failure(key, suffix, error)
            raise
        self.store(key, suffix, target, meta)
        return meta, "rebuilt" if key in self.rebuilt else "miss"


def _copy_hashing(source: Any, target: Any) -> str:
    """Copy one open binary file to another in blocks; the sha256 of the bytes copied."""
    digest = hashlib.sha256()
    for block in iter(lambda: source.read(1 << 20), b""):
        digest.update(block)
        target.write(block)
    return digest.hexdigest()


def _failure_digest(failure: object) -> str:
    return hashlib.sha256(json.dumps(failure, sort_keys=True).encode()).hexdigest()
