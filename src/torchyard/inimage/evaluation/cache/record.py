"""What a case's evaluation read while it ran, recorded and kept with each verdict it decides, so a replay is
proven, not guessed: on lookup every file, folder and variable the record names is read again, and any
difference is a miss.

The window is the making of the case's reference (its factory, and its forward and loss in eager), where the
project's code runs in plain Python. In it:

- `sys.settrace` names each project file whose code runs (a trace function called once per new code object:
  the project's code imported on first use, or found by a computed name, counts by its file's digest).
- An audit hook (`sys.addaudithook`) names each file opened and each folder listed, with its digest then.
- `os.environ` reads are recorded by name, with a digest of the value (never the value).
- What cannot be recorded makes the case's results unkeepable, said in one line: a subprocess, a native library
  loaded through ctypes, a network connection, the whole environment listed, a trace function already set, or
  a native library of the project loaded in the process (an extension it built: the code in it is not seen).

Reads a project module makes while it is imported, outside any window (a data file or a variable read by its
body, at collection or on first use in a backend's run), are recorded from the run's start (`start`), by that
module's file, and join the record of each case that ran that file's code or whose key holds it
(`Record.beyond`); what cannot be recorded there makes those cases' results unkeepable. The import system's own
reads of source are not reads.

A file or variable read by the project's code is also tied to the code (the function) that read it, for the
whole process: a later case whose window runs that code carries the read too, so a module-level cache filled
by an earlier case's first call is still keyed. The files the case's key holds already (its walk's, model by
model) are left out of its record (`Record.beyond`): a change to another model of the same file moves none of
its results.

"Project" is code neither of the standard library, of torchyard, nor of a distribution installed from an
index (`keys.released` by path): a released distribution counts by its version, in the stack's identity.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import inspect
import os
import stat
import sys
import sysconfig
import threading
from collections.abc import Collection, Iterator
from pathlib import Path
from types import CodeType, FrameType
from typing import Any

from torchyard import contract
from torchyard.inimage.evaluation.cache.keys import installed_pin
from torchyard.inimage.evaluation.cache.project_code import TORCHYARD

# What a window cannot record, by audit event: a result whose evaluation did any of these is never kept.
UNRECORDABLE = {
    "subprocess.Popen": "it starts a subprocess",
    "os.system": "it starts a shell command",
    "os.posix_spawn": "it starts a process",
    "os.exec": "it starts a program",
    "ctypes.dlopen": "it loads a native library through ctypes",
    "socket.connect": "it opens a network connection",
    "socket.getaddrinfo": "it resolves a network name",
    "os.fork": "it forks a process",
    "os.forkpty": "it forks a process",
}
STANDARD = tuple(
    Path(folder).resolve() for folder in {sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["platstdlib"]}
)
VOLATILE = (Path("/proc"), Path("/sys"), Path("/dev"))
ABSENT = "absent"


@dataclasses.dataclass
class Record:
    """What a window read: files and folders by digest, variables by a digest of their value, and why the
    results it decides cannot be kept ("" where they can)."""

    files: dict[str, str] = dataclasses.field(default_factory=dict)
    folders: dict[str, str] = dataclasses.field(default_factory=dict)
    variables: dict[str, str] = dataclasses.field(default_factory=dict)
    unkeepable: str = ""
    # Per project file, the qualified names of its code that ran (what `beyond` reads; never kept)
    ran: dict[str, frozenset[str]] = dataclasses.field(default_factory=dict, repr=False, compare=False)
    # Per project file, what its code read outside any window, and why a read there cannot be recorded (never kept:
    # `beyond` takes those of the files the case ran or its key holds)
    ambient: dict[str, frozenset[tuple[str, str]]] = dataclasses.field(default_factory=dict, repr=False, compare=False)
    ambient_unkeepable: dict[str, str] = dataclasses.field(default_factory=dict, repr=False, compare=False)

    def as_dict(self) -> dict[str, Any]:
        hidden = ("ran", "ambient", "ambient_unkeepable")
        return {key: value for key, value in dataclasses.asdict(self).items() if key not in hidden}

    @classmethod
    def from_dict(cls, data: object) -> Record:
        """A kept record; `ValueError` where it is not one (the verdict is then evaluated again)."""
        if not isinstance(data, dict) or set(data) != {"files", "folders", "variables", "unkeepable"}:
            raise ValueError("not a record")
        if not all(isinstance(data[k], dict) for k in ("files", "folders", "variables")):
            raise ValueError("not a record")
        return cls(dict(data["files"]), dict(data["folders"]), dict(data["variables"]), str(data["unkeepable"]))

    def changed(self, env: Any = os.environ) -> str:
        """What of the record is no longer as it was, in a line; "" where nothing is."""
        for path, digest in sorted(self.files.items()):
            if file_digest(path) != digest:
                return f"the file {path} changed"
        for path, digest in sorted(self.folders.items()):
            if folder_digest(path) != digest:
                return f"the folder {path} lists other entries"
        for name, digest in sorted(self.variables.items()):
            if value_digest(env.get(name)) != digest:
                return f"the variable {name} changed"
        return ""

    def beyond(self, keyed: Collection[str], models: Collection[str] = ()) -> Record:
        """The record without the files the case's key already holds (`keyed`: its walk's files, counted model
        by model), so that a change to another model of the same file moves no result of this case; a file whose
        code that ran includes a model the key left out (one the walk did not reach, `models` being those it
        reached as `module:qualname`: reached by a computed name, say) stays, whole."""
        held = {path for path in self.files if path in keyed and not _unkeyed_model_ran(path, self.ran, models)}
        files = {path: d for path, d in self.files.items() if path not in held}
        folders, variables, unkeepable = dict(self.folders), dict(self.variables), self.unkeepable
        for reader in sorted(set(self.ran) | set(keyed)):  # what their code read before any window
            for kind, name in sorted(self.ambient.get(reader, ())):
                if kind == "file":
                    files.setdefault(name, file_digest(name))
                elif kind == "folder":
                    folders.setdefault(name, folder_digest(name))
                else:
                    variables.setdefault(name, value_digest(os.environ.get(name)))
            unkeepable = unkeepable or self.ambient_unkeepable.get(reader, "")
        return dataclasses.replace(self, files=files, folders=folders, variables=variables, unkeepable=unkeepable)


def _unkeyed_model_ran(path: str, ran: dict[str, frozenset[str]], models: Collection[str]) -> bool:
    """Whether code of a model class of `path` that is not in `models` ran (its body is not in the key)."""
    module = next(
        (m for m in list(sys.modules.values()) if isinstance(getattr(m, "__file__", None), str)
         and project_file(m.__file__) == path),
        None,
    )  # fmt: skip
    if module is None:
        return bool(ran.get(path))  # no module to read its classes from: keep what ran
    for name in ran.get(path, ()):
        top = name.split(".", maxsplit=1)[0]
        found = vars(module).get(top)
        if isinstance(found, type) and _is_model(found) and f"{module.__name__}:{top}" not in models:
            return True
    return False


def _is_model(klass: type) -> bool:
    import torch  # the record itself needs none: only this question does

    return issubclass(klass, torch.nn.Module)


def file_digest(path: str) -> str:
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except (OSError, ValueError):
        return ABSENT


def folder_digest(path: str) -> str:
    try:
        names = sorted(entry.name for entry in Path(path).iterdir())
    except (OSError, ValueError):
        return ABSENT
    return hashlib.sha256("\0".join(names).encode(errors="surrogateescape")).hexdigest()


def value_digest(value: str | None) -> str:
    return ABSENT if value is None else hashlib.sha256(value.encode(errors="surrogateescape")).hexdigest()


@functools.cache
def project_file(filename: str) -> str | None:
    """`filename` resolved where it is the project's (its code or its data), else None."""
    if not filename or filename.startswith("<"):
        return None
    path = Path(filename).resolve()
    if "__pycache__" in path.parts:  # compiled bytecode: its source is what runs, and is recorded
        return None
    if path.is_relative_to(TORCHYARD) or any(path.is_relative_to(root) for root in (*STANDARD, *VOLATILE)):
        return None
    if installed_pin(path) is not None:  # a released distribution's file: its version keys it
        return None
    return str(path)


def project_libraries() -> list[str]:
    """The project's native libraries this process has loaded (an extension it built, a library it opened
    through ctypes or `torch.ops.load_library`): shared objects mapped from a folder on `sys.path` that no
    released distribution holds."""
    try:
        lines = Path("/proc/self/maps").read_text().splitlines()
    except OSError:  # not Linux: the loaded extension modules' files
        lines = [str(getattr(module, "__file__", "")) for module in list(sys.modules.values())]
    mapped = {line.split(maxsplit=5)[-1] for line in lines if ".so" in line}
    made = _compiler_caches()
    return sorted(
        path
        for path in mapped
        if _on_path(path) and project_file(path) is not None and not any(Path(path).is_relative_to(c) for c in made)
    )


def _compiler_caches() -> list[Path]:
    """Where the stack's compilers keep what they build (inductor's kernels, in the entry's cache): a `--local`
    run's cache lies in the checkout, on the path, and its kernels are no native library of the project's."""
    named = (os.environ.get(contract.INDUCTOR_CACHE), os.environ.get("TORCHINDUCTOR_CACHE_DIR"))
    return [Path(name).resolve() for name in named if name]


@functools.cache
def _on_path(name: str) -> bool:
    path = Path(name)
    return path.is_absolute() and any(path.is_relative_to(folder) for folder in _path_folders())


def _path_folders() -> list[Path]:
    return [Path(entry).resolve() for entry in sys.path if entry and Path(entry).is_dir()]


# Reads tied to the project code (a function, a module's body) that made them, for the process.
_READS_BY_CODE: dict[CodeType, set[tuple[str, str]]] = {}


class _Window:
    def __init__(self) -> None:
        self.ran: set[CodeType] = set()  # the project's code that ran
        self.reads: set[tuple[str, str]] = set()  # ("file" | "folder" | "variable", name)
        self.unkeepable = ""
        self.seen: set[CodeType] = set()
        self.reading: set[CodeType] = set()  # the project code that read something itself in this window

    def trace(self, frame: FrameType, event: str, arg: object) -> None:
        code = frame.f_code
        if code not in self.seen:
            self.seen.add(code)
            if project_file(code.co_filename) is not None:
                self.ran.add(code)

    def read(self, kind: str, name: str) -> None:
        self.reads.add((kind, name))
        frame: FrameType | None = sys._getframe(2)
        while frame is not None:
            if project_file(frame.f_code.co_filename) is not None:
                _READS_BY_CODE.setdefault(frame.f_code, set()).add((kind, name))
                self.reading.add(frame.f_code)
                return
            frame = frame.f_back

    def refuse(self, why: str) -> None:
        self.unkeepable = self.unkeepable or why

    def record(self) -> Record:
        native = project_libraries()
        if native:
            self.refuse(f"a native library of the project is loaded ({native[0]}): what it computes is not recorded")
        reads = set(self.reads)
        # What code that read nothing here read in an earlier window (a cache it filled then): a shared loader that
        # read this case's own files here brings no other case's along.
        for code in self.ran - self.reading:
            reads |= _READS_BY_CODE.get(code, set())
        ran: dict[str, set[str]] = {}
        for code in self.ran:
            if (found := project_file(code.co_filename)) is not None:
                ran.setdefault(found, set()).add(getattr(code, "co_qualname", code.co_name))
        files = {path: file_digest(path) for path in ran}
        files |= {name: file_digest(name) for kind, name in reads if kind == "file"}
        folders = {name: folder_digest(name) for kind, name in reads if kind == "folder"}
        variables = {name: value_digest(os.environ.get(name)) for kind, name in reads if kind == "variable"}
        return Record(
            files, folders, variables, self.unkeepable, {path: frozenset(names) for path, names in ran.items()},
            {path: frozenset(found) for path, found in _AMBIENT.items()}, dict(_AMBIENT_UNKEEPABLE),
        )  # fmt: skip


_ACTIVE: list[_Window] = []
# Reads outside any window, by the project file whose code made them (`start`), and why one could not be recorded
_AMBIENT: dict[str, set[tuple[str, str]]] = {}
_AMBIENT_UNKEEPABLE: dict[str, str] = {}
_AMBIENT_ON: list[bool] = []


def start() -> None:
    """Record the project's reads outside any window from now on, for the process (the run's start: before the
    project's conftest and cases are imported)."""
    _hooked()
    _AMBIENT_ON[:] = [True]


def _reader(frame: FrameType | None) -> str | None:
    """The project module being imported on the stack from `frame` up (the innermost project frame that is a
    module's or a class's body, not a function's), None where none is: a read outside a window by a function is
    a backend's run of code its window recorded already."""
    while frame is not None:
        code = frame.f_code
        if not code.co_flags & inspect.CO_OPTIMIZED and (found := project_file(code.co_filename)) is not None:
            return found
        frame = frame.f_back
    return None


def _ambient(kind: str, name: str) -> None:
    reader = _reader(sys._getframe(1))  # torchyard's own frames below the reader are none of the project's
    if reader is not None:
        _AMBIENT.setdefault(reader, set()).add((kind, name))


def _ambient_refusal(why: str) -> None:
    reader = _reader(sys._getframe(1))
    if reader is not None:
        _AMBIENT_UNKEEPABLE.setdefault(reader, why)


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if not _ACTIVE:
        # the events it records first: reading a frame is an audit event of its own
        if _AMBIENT_ON and event in OUTSIDE_EVENTS and not _by_importlib():
            _outside_windows(event, args)
        return
    window = _ACTIVE[-1]
    if event == "open":
        name = _path_of(args[0])
        if name is not None and not Path(name).is_absolute() and not os.path.lexists(name):
            # relative to a folder descriptor (`dir_fd`), which the event does not carry: not recordable
            window.refuse(f"it opens {name!r} relative to a folder the record cannot name")
        elif name is not None and _regular_or_absent(name):
            found = project_file(name)
            if found is not None:
                window.read("file", found)
    elif event in ("os.listdir", "os.scandir"):
        name = _path_of(args[0]) if args else None
        found = project_file(name or ".")
        if found is not None and not _by_importlib():  # the import system's own look at a folder on the path
            window.read("folder", found)
    elif event in UNRECORDABLE or event.startswith("os.exec"):
        window.refuse(f"{UNRECORDABLE.get(event, UNRECORDABLE['os.exec'])} ({event})")


OUTSIDE_EVENTS = frozenset(("open", "os.listdir", "os.scandir", "os.exec", "os.execve", *UNRECORDABLE))


def _outside_windows(event: str, args: tuple[Any, ...]) -> None:
    """What the project's code reads outside any window (`start`): files and folders by name, and what cannot be
    recorded. Only where the project's code is on the stack: torch, pytest and torchyard read on their own."""
    if event == "open":
        name = _path_of(args[0])
        if name is not None and Path(name).is_absolute() and _regular_or_absent(name):
            found = project_file(name)
            if found is not None:
                _ambient("file", found)
    elif event in ("os.listdir", "os.scandir"):
        name = _path_of(args[0]) if args else None
        found = project_file(name or ".")
        if found is not None:
            _ambient("folder", found)
    elif event in UNRECORDABLE or event.startswith("os.exec"):
        _ambient_refusal(f"{UNRECORDABLE.get(event, UNRECORDABLE['os.exec'])} when it is imported ({event})")


def _by_importlib() -> bool:
    """Whether the listing being audited is the import system's (its finder caches a folder's names)."""
    frame = sys._getframe(2)  # _audit's caller: the code that listed
    return frame is not None and frame.f_code.co_filename.startswith("<frozen importlib")


def _path_of(value: object) -> str | None:
    if isinstance(value, int):  # a file descriptor: opened before, by a path recorded then
        return None
    try:
        return os.fsdecode(value)  # type: ignore[arg-type]
    except TypeError:
        return None


def _regular_or_absent(name: str) -> bool:
    try:
        return stat.S_ISREG(Path(name).stat().st_mode)
    except (OSError, ValueError):
        return True  # absent: that it is missing decided what the code did


@functools.cache
def _hooked() -> None:
    """The audit hook and the environment's recorded reads, once a process (an audit hook cannot be removed:
    outside a window it records only what `start` asks for)."""
    sys.addaudithook(_audit)
    _RecordedEnviron(type(os.environ)).__enter__()


class _RecordedEnviron:
    """`os.environ`'s class's reads, recorded by name while a window is open."""

    def __init__(self, environ_class: Any) -> None:
        self.environ_class = environ_class
        self.getitem = environ_class.__getitem__
        self.iter = environ_class.__iter__

    def __enter__(self) -> None:
        getitem, iterate = self.getitem, self.iter

        def recorded_getitem(environ: Any, key: Any) -> Any:
            if environ is os.environ and isinstance(key, str):
                if _ACTIVE:
                    _ACTIVE[-1].read("variable", key)
                elif _AMBIENT_ON:
                    _ambient("variable", key)
            return getitem(environ, key)

        def recorded_iter(environ: Any) -> Iterator[Any]:
            if environ is os.environ:
                if _ACTIVE:
                    _ACTIVE[-1].refuse("it lists the whole environment (os.environ iterated)")
                elif _AMBIENT_ON:
                    _ambient_refusal("it lists the whole environment (os.environ iterated) when it is imported")
            return iterate(environ)  # type: ignore[no-any-return]

        self.environ_class.__getitem__ = recorded_getitem
        self.environ_class.__iter__ = recorded_iter

    def __exit__(self, *_: object) -> None:
        self.environ_class.__getitem__ = self.getitem
        self.environ_class.__iter__ = self.iter


@contextlib.contextmanager
def recording() -> Iterator[list[Record]]:
    """A window: what runs in it is recorded; the record is in the yielded list once the window closes."""
    _hooked()
    window = _Window()
    done: list[Record] = []
    previous = sys.gettrace()
    if previous is not None:
        window.refuse("a trace function is already set (a debugger or coverage): what ran cannot be recorded")
    _ACTIVE.append(window)
    if previous is None:
        sys.settrace(window.trace)
        threading.settrace(window.trace)  # the threads the window starts (a pool made before it is not traced)
    try:
        yield done
    finally:
        if previous is None:
            sys.settrace(None)
            threading.settrace(None)
        _ACTIVE.pop()
        done.append(window.record())
