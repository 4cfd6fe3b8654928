"""The artifact cache's key: a sha256 over everything that decides a lowered program (`artifacts`): the
backend and its options, the versions of every backend's distributions and numpy's, the device and dtype, the
case's name, dynamic shapes and first input tree, the module's weights and buffers byte for byte, its code
(project code by source, released distributions' by version, named tuples by fields, dataclasses by source),
and what each submodule holds beyond its weights. docs/concepts/running.md lists what counts and how.

Code whose source cannot be read (made at run time outside any released distribution) gives no key: that
case is never cached, and the report says why (`why_unkeyable`). So does anything else that stops the key
code: an error in it is torchyard's, never the model's (`Unkeyable` names torchyard's file and the error), and
the case runs uncached. Objects are read as the interpreter stores them, never through their `__getattr__`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import functools
import hashlib
import importlib.metadata
import importlib.util
import inspect
import json
import platform
import re
import subprocess
import sys
import types
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import torch
from torch.utils import _pytree as pytree

from torchyard.inimage.evaluation.cache.digests import NoDigest, tensor_digest
from torchyard.inimage.evaluation.errors import torchyards_fault
from torchyard.names import BACKEND_DISTRIBUTIONS, DEVICE_FACTS, module_name

DISTRIBUTIONS = (*BACKEND_DISTRIBUTIONS, "numpy")
VERSIONED = tuple(module_name(name) for name in DISTRIBUTIONS)  # their top-level modules
SIMPLE = (int, float, str, bool, bytes, type(None))
FORMAT = 2  # 2: instance attributes, non-persistent buffers, released code by version
UNKEYED_BY_FAULT = "torchyard's key code failed, a fault of torchyard's, not the model's: "  # then the error


class Unkeyable(Exception):
    """The case cannot be keyed (code defined interactively, say, or an error in the key code): it is not
    cached, and its results say why."""


@contextlib.contextmanager
def _key_code() -> Iterator[None]:
    """Any error inside but `Unkeyable` is the key code's own: torchyard's, not the case's."""
    try:
        yield
    except Unkeyable:
        raise
    except NoDigest as error:
        raise Unkeyable(f"torchyard's key code cannot read {error}") from error
    except Exception as error:
        raise Unkeyable(f"{UNKEYED_BY_FAULT}{torchyards_fault(error)}") from error


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
    """The processor's model name: Linux's /proc/cpuinfo, macOS's sysctl (where `platform.processor()` says only
    "arm" for every Apple chip, and MPS devices are told apart by it)."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        if platform.system() == "Darwin":
            try:
                named = subprocess.run(
                    ["/usr/sbin/sysctl", "-n", "machdep.cpu.brand_string"], capture_output=True, text=True, check=True
                )
                return named.stdout.strip() or platform.processor()
            except (OSError, subprocess.CalledProcessError):
                pass
        return platform.processor()
    return next((line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")), "")


def device_identity(device: torch.device) -> dict[str, Any]:
    """What the device is, as far as a lowered program can depend on it: its model as the accelerator's facts
    say it is named (`names.DEVICE_FACTS`), and for CUDA and HIP the capability, versions and driver."""
    identity: dict[str, Any] = {"type": device.type, "machine": platform.machine()}
    named_by = next((facts.named_by for facts in DEVICE_FACTS.values() if facts.torch_type == device.type), None)
    if named_by is None:
        raise Unkeyable(f"no accelerator of torchyard's targets torch's {device.type!r} device")
    if named_by == "processor":
        identity["processor"] = _cpu_model()
        return identity
    module = getattr(torch, named_by)
    if not module.is_available():
        return identity
    index = device.index or 0
    identity["name"] = module.get_device_name(index)
    if device.type == "cuda":
        identity |= {
            "capability": list(torch.cuda.get_device_capability(index)),
            "cuda": torch.version.cuda,
            "hip": torch.version.hip,
            "driver": _nvidia_driver(),
        }
    return identity


def _versioned(module_name: str) -> bool:
    """Code whose version is already in the key: the packages above and the standard library."""
    top = module_name.split(".", maxsplit=1)[0]
    return top in VERSIONED or top in sys.stdlib_module_names or top in {"builtins", "__future__", ""}


@functools.cache
def _top_level_distributions() -> Mapping[str, list[str]]:
    """Top-level module -> the distributions that install it (every installed one's files are read: once)."""
    return importlib.metadata.packages_distributions()


@dataclasses.dataclass(frozen=True)
class _Installed:
    pin: str | None  # `name==version` where it came from an index, else None
    root: Path  # the folder its files are listed relative to
    files: frozenset[str]

    def holds(self, path: Path) -> bool:
        return path.is_relative_to(self.root) and path.relative_to(self.root).as_posix() in self.files


@functools.cache
def _installed(name: str) -> _Installed | None:
    try:
        distribution = importlib.metadata.distribution(name)
    except importlib.metadata.PackageNotFoundError:
        return None
    from_index = distribution.read_text("direct_url.json") is None
    return _Installed(
        f"{distribution.metadata['Name']}=={distribution.version}" if from_index else None,
        Path(str(distribution.locate_file(""))).resolve(),
        frozenset(str(file) for file in distribution.files or ()),
    )


def _candidates(top: str) -> Iterator[str]:
    """The distributions that may hold top-level module `top`: mostly one named as it is; only where that one
    does not (PIL's, yaml's), every installed distribution is read."""
    yield top
    yield from _top_level_distributions().get(top, [])


def _loaded_file(module_name: str) -> str | None:
    """The file of `module_name`, or of the nearest package above it that is loaded: a compiled class often
    names a module that is not one (`pkg._native.Handle`, made by `pkg/_native.so`)."""
    parts = module_name.split(".")
    for end in range(len(parts), 0, -1):
        module = sys.modules.get(".".join(parts[:end]))
        if module is not None:
            where = vars(module).get("__file__")  # the module's own, never its `__getattr__`'s answer
            return where if isinstance(where, str) else None
    return None


@functools.cache
def released(module_name: str) -> str | None:
    """`name==version` of the distribution whose installed files hold `module_name`, where it came from an
    index (no `direct_url.json`, PEP 610): a released version's code does not change, so it counts by its
    version, not its source. None for code from a path (the project itself, an editable or local install,
    a checkout on `sys.path`) or from no distribution: that counts by its source."""
    where = _loaded_file(module_name)
    if not where or not {"site-packages", "dist-packages"} & set(Path(where).parts):
        return None  # not installed (the project's own code, a checkout on the path): no distribution to ask
    top = module_name.split(".", maxsplit=1)[0]
    path = Path(where).resolve()
    for name in _candidates(top):
        installed = _installed(name)
        if installed is not None and installed.holds(path):
            return installed.pin
    return None


@functools.cache
def installed_pin(path: Path) -> str | None:
    """`name==version` of the distribution installed from an index whose files hold `path` (its compiled
    bytecode with it); None for any other file."""
    parts = path.parts
    for marker in ("site-packages", "dist-packages"):
        if marker in parts[:-1]:
            top = parts[len(parts) - 1 - parts[::-1].index(marker) + 1]
            source = path
            if "__pycache__" in parts:  # `pkg/__pycache__/mod.cpython-311.pyc` is `pkg/mod.py`'s
                source = path.parent.parent / f"{path.name.split('.', maxsplit=1)[0]}.py"
            for name in _candidates(top.split(".", maxsplit=1)[0].split("-", maxsplit=1)[0]):
                installed = _installed(name)
                if installed is not None and installed.holds(source):
                    return installed.pin
    return None


def _unsourced_name(klass: type) -> str | None:
    """What keys a class that has no source of its own (`collections.namedtuple`'s): its fields and defaults."""
    fields = getattr(klass, "_fields", None)
    if issubclass(klass, tuple) and isinstance(fields, tuple):
        return f"namedtuple {klass.__module__}.{klass.__qualname__}{fields}{getattr(klass, '_field_defaults', {})}"
    return None


# Where a released callable keeps the function it wraps: `functools.wraps`'s, numba's dispatchers', a partial's.
WRAPPED = ("__wrapped__", "py_func", "func")
# A value whose text names a memory address (`<object at 0x7f...>`) differs in every process: a key holding one
# would never be found again, silently.
ADDRESS = re.compile(r" at 0x[0-9a-fA-F]{6,}")

# What every nn.Module holds (parameters, buffers and submodules are keyed as weights and classes), apart
# from its hooks, which change what it computes: each hook function is keyed.
MODULE_INTERNALS = frozenset(vars(torch.nn.Module()))


class _CodeWalk:
    """The code and values a module's behaviour depends on: from its classes, through the globals their
    methods name, and from its instance attributes, through the values they hold."""

    def __init__(self, registered: Iterable[torch.nn.Module] = ()) -> None:
        self.parts: list[str] = []
        self.seen: dict[int, object] = {}  # each object walked, kept alive so that no other takes its id
        self.registered = {id(module) for module in registered}  # their weights are keyed apart
        self.modules: set[str] = set()  # the project's modules reached (`project_code` keys their files)
        self.classes: set[str] = set()  # and its classes, as `module:qualname`
        self.files: set[str] = set()  # submodules named through their package (`pkg.ops.fused`), keyed by file

    def add(self, obj: object) -> None:
        if id(obj) in self.seen:
            return
        self.seen[id(obj)] = obj
        if isinstance(obj, type):
            self._class(obj)
        elif isinstance(obj, types.FunctionType):
            self._function(obj)
        elif isinstance(obj, types.ModuleType):
            self._module(obj)
        elif isinstance(obj, SIMPLE):
            self.parts.append(_stable(repr(obj)))
        elif isinstance(obj, torch.Tensor):
            self.parts.append(tensor_digest(obj))
        elif isinstance(obj, torch.dtype | torch.device | enum.Enum):
            self.parts.append(f"{type(obj).__qualname__} {obj}")
            self.add(type(obj))
        else:
            self._value(obj)

    def _value(self, obj: object) -> None:
        """A value held by a module or named by its code: containers by their items, a partial by its function
        and arguments, a dataclass or any other object by its class and attributes."""
        if isinstance(obj, list | tuple):
            self.parts.append(f"{type(obj).__qualname__}[{len(obj)}]")
            for item in obj:
                self.add(item)
        elif isinstance(obj, set | frozenset):  # in an order that no hash seed changes
            self.parts.append(f"{type(obj).__qualname__} {sorted(_stable(repr(item)) for item in obj)}")
        elif isinstance(obj, dict):
            self.parts.append(f"dict[{len(obj)}]")
            for key, value in obj.items():
                self.parts.append(_stable(repr(key)) if isinstance(key, SIMPLE) else type(key).__qualname__)
                self.add(value)
        elif isinstance(obj, functools.partial):
            self.parts.append(f"partial {sorted(obj.keywords)}")
            for part in (obj.func, *obj.args, *obj.keywords.values()):
                self.add(part)
        elif isinstance(obj, types.MethodType):
            self.add(obj.__func__)
            self.add(obj.__self__)
        elif isinstance(obj, types.BuiltinFunctionType):
            self.parts.append(f"{obj.__module__}.{obj.__qualname__}")
        else:
            self._object(obj)

    def _object(self, obj: object) -> None:
        """Any other object: its class, and (a module's, a dataclass's, or one of a class outside the stack)
        its attributes. The stack's own objects (a logger, a lock) count by their class alone."""
        klass = type(obj)
        self.add(klass)
        if _versioned(klass.__module__) and self._wrapper(obj):
            return
        if isinstance(obj, torch.nn.Module):
            attributes = self._module_attributes(obj)
        elif dataclasses.is_dataclass(obj):
            attributes = {item.name: getattr(obj, item.name) for item in dataclasses.fields(obj)}
        elif _versioned(klass.__module__):
            return
        elif callable(obj) and released(klass.__module__):
            self._released_callable(obj)
            return
        else:
            attributes = _instance_attributes(obj)
        for name, value in sorted(attributes.items()):
            self.parts.append(f".{name}")
            self.add(value)

    def _wrapper(self, obj: object) -> bool:
        """A standard library's or torch's wrapper around the project's function (`functools.lru_cache`,
        `functools.wraps`, `torch.jit.script`): the function it wraps counts by its code, and a script by the
        TorchScript it compiled to; its class alone would leave a change to the function unkeyed."""
        if isinstance(obj, torch.jit.ScriptFunction):
            self.parts.append(f"script\0{obj.code}")
        found = False
        for name in ("__wrapped__", "_torchdynamo_inline"):  # read as stored: never a foreign `__getattr__`
            inner = inspect.getattr_static(obj, name, None)
            if isinstance(inner, types.FunctionType):
                self.parts.append(f".{name}")
                self.add(inner)
                found = True
        return found or isinstance(obj, torch.jit.ScriptFunction)

    def _released_callable(self, obj: object) -> None:
        """A released distribution's callable that is not a model (a JIT compiler's dispatcher, a compiled
        function): its class counts by version, and the project's function it wraps by its code. What it holds
        inside (compiled code, caches keyed by memory addresses) is the release's, and would move every run."""
        for name in WRAPPED:
            inner = _instance_attributes(obj).get(name)
            if isinstance(inner, types.FunctionType):
                self.parts.append(f".{name}")
                self.add(inner)

    def _module_attributes(self, module: torch.nn.Module) -> dict[str, object]:
        """What a module holds beyond what every module does; its hooks; and, for one outside the model's tree
        of submodules (whose weights are keyed apart), its parameters, buffers and submodules."""
        kept = set() if id(module) in self.registered else {"_parameters", "_buffers", "_modules"}
        return {
            name: list(value.values()) if "hook" in name and isinstance(value, dict) else value
            for name, value in vars(module).items()
            if name not in MODULE_INTERNALS or name in kept or ("hook" in name and isinstance(value, dict))
        }

    def _module(self, module: types.ModuleType) -> None:
        if _versioned(module.__name__):
            return
        pin = released(module.__name__)
        self.parts.append(f"module {module.__name__} {pin}" if pin else f"module {module.__name__}\0{_source(module)}")
        if not pin:
            self.modules.add(module.__name__)

    def _class(self, klass: type) -> None:
        if _versioned(klass.__module__):
            self.parts.append(f"{klass.__module__}.{klass.__qualname__}")
            return
        pin = released(klass.__module__)
        if pin:
            self.parts.append(f"{klass.__module__}.{klass.__qualname__} {pin}")
            return
        self.modules.add(klass.__module__)
        self.classes.add(f"{klass.__module__}:{klass.__qualname__}")
        unsourced = _unsourced_name(klass)
        try:
            self.parts.append(f"class {klass.__qualname__}\0{_source(klass)}")
        except Unkeyable:
            if unsourced is None:
                raise
            self.parts.append(unsourced)
        if dataclasses.is_dataclass(klass):
            self._generated_methods(klass)
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

    def _generated_methods(self, klass: type) -> None:
        """A dataclass's generated methods (`__init__`, `__repr__`, `__eq__`, made by exec, so without a source;
        `__repr__` inside reprlib's wrapper): its fields decide them, and the class's source, keyed, holds them."""
        for value in vars(klass).values():
            method = value
            while isinstance(method, types.FunctionType):
                if method.__code__.co_filename.startswith("<"):
                    self.seen[id(method)] = method
                method = getattr(method, "__wrapped__", None)

    def _function(self, function: types.FunctionType) -> None:
        if function.__module__ and _versioned(function.__module__):
            self.parts.append(f"{function.__module__}.{function.__qualname__}")
            return
        pin = released(function.__module__ or "")
        if pin:
            self.parts.append(f"{function.__module__}.{function.__qualname__} {pin}")
            return
        self.parts.append(f"function {function.__qualname__}\0{_source(function)}")
        if function.__module__:
            self.modules.add(function.__module__)
        self._names(function)

    def _submodule_file(self, name: str) -> None:
        if name in self.files:
            return
        self.files.add(name)
        text = _submodule_file(name)
        if text is not None:
            self.parts.append(f"submodule {name}\0{text}")

    def _names(self, function: types.FunctionType) -> None:
        """Every global the function's code (nested code included) names, and its closure's cells."""
        codes = [function.__code__]
        while codes:
            code = codes.pop()
            codes += [const for const in code.co_consts if isinstance(const, types.CodeType)]
            packages = []
            for name in code.co_names:  # attribute names (`x.view`) are here too; only globals resolve
                if name in function.__globals__:
                    value = function.__globals__[name]
                    self.add(value)
                    if isinstance(value, types.ModuleType) and _project_package(value):
                        packages.append(value.__name__)
            for package in packages:  # `pkg.ops.fused(x)`: a submodule a package may load only when first asked
                for name in code.co_names:
                    self._submodule_file(f"{package}.{name}")
        for cell in function.__closure__ or ():
            try:
                self.add(cell.cell_contents)
            except ValueError:  # an empty cell
                continue


def _project_package(module: types.ModuleType) -> bool:
    return (
        vars(module).get("__path__") is not None and not _versioned(module.__name__) and not released(module.__name__)
    )


def _submodule_file(name: str) -> str | None:
    """The source of submodule `name` as its file holds it, found without importing it, whether or not a
    worker has loaded it yet (so the key is the same in both); None where it is no module of a file."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError, AttributeError):
        return None
    origin = spec.origin if spec is not None else None
    if not origin or not origin.endswith(".py"):
        return None
    try:
        return Path(origin).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


def _stable(text: str) -> str:
    """`text`, where it names no memory address; else `Unkeyable`, saying what it held."""
    found = ADDRESS.search(text)
    if found is None:
        return text
    shown = text if len(text) <= 80 else f"{text[:77]}..."
    raise Unkeyable(f"a value the model reaches names a memory address, which differs every run: {shown}")


def _instance_attributes(obj: object) -> dict[str, object]:
    """An object's own attributes, as the interpreter keeps them: never through its class's `__getattr__`,
    which a native library's handle answers for every name, `__dict__` included. An object without a
    `__dict__` (slots, a compiled type) counts by its class."""
    try:
        held = object.__getattribute__(obj, "__dict__")
    except AttributeError:
        return {}
    if not isinstance(held, dict):
        raise Unkeyable(
            f"a {type(obj).__qualname__} answers `__dict__` with a {type(held).__qualname__}, not its attributes"
        )
    return {name: value for name, value in held.items() if isinstance(name, str)}


@functools.cache  # a class's source is found by parsing its whole file: once a run, not once a backend
def _source(obj: Any) -> str:
    try:
        return inspect.getsource(obj)
    except (OSError, TypeError) as error:
        name = getattr(obj, "__qualname__", None) or getattr(obj, "__name__", repr(obj))
        module = getattr(obj, "__module__", None) or name
        made = (
            "compiled code outside any released distribution has none"
            if isinstance(error, TypeError) and "built-in" in str(error)
            else "code made at run time, by exec or in a notebook, has none"
        )
        raise Unkeyable(
            f"no source for {name!r} in {module} ({made}; from an installed release it counts by version)"
        ) from error


def _input_spec(call_args: object) -> list[Any]:
    flat, spec = pytree.tree_flatten(call_args)
    described: list[Any] = [str(spec)]
    for leaf in flat:
        if isinstance(leaf, torch.Tensor) and leaf.layout != torch.strided:  # no strides to have
            described.append([str(leaf.dtype), list(leaf.shape), str(leaf.layout)])
        elif isinstance(leaf, torch.Tensor):
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
    """The content key of one lowering; raises `Unkeyable` when the case cannot be keyed."""
    with _key_code():
        weights = weight_digests(module)
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
            "code": code_digest(module),
        }
        return hashlib.sha256(json.dumps(document, sort_keys=True, default=str).encode()).hexdigest()


def code_digest(module: torch.nn.Module, *also: object) -> str:
    """sha256 of what decides the module's behaviour beyond its weights (`_CodeWalk`), and of the code of
    `also` (a case's loss function, say); raises `Unkeyable`."""
    return code_reach(module, *also)[0]


def code_reach(module: torch.nn.Module, *also: object) -> tuple[str, frozenset[str], frozenset[str]]:
    """`code_digest`, the names of the project's modules the walk reached, and of its classes reached (as
    `module:qualname`); raises `Unkeyable`."""
    with _key_code():
        walk = _CodeWalk(registered=module.modules())
        for sub in module.modules():
            walk.add(sub)
        for obj in also:
            walk.add(obj)
        digest = hashlib.sha256("\0\0".join(walk.parts).encode()).hexdigest()
        return digest, frozenset(walk.modules), frozenset(walk.classes)


def weight_digests(module: torch.nn.Module) -> list[tuple[str, str]]:
    """Each weight and buffer of `module`, non-persistent buffers too, by name and digest."""
    with _key_code():
        state = module.state_dict(keep_vars=False)
        weights = [(name, tensor_digest(value)) for name, value in state.items()]
        return weights + [(name, tensor_digest(value)) for name, value in module.named_buffers() if name not in state]


def why_unkeyable(module: torch.nn.Module) -> str:
    """Why the artifact cache cannot key `module` ("" where it can)."""
    try:
        code_digest(module)
    except Unkeyable as error:
        return str(error)
    return ""
