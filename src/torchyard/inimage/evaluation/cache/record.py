"""What a case's evaluation read while it ran, recorded and kept with each verdict it decides, so a replay is
proven, not guessed: on lookup every file, folder and variable the record names is read again, and any
difference is a miss.

The window is the making of the case's reference (its factory, and its forward and loss in eager), where the
project's code runs in plain Python. In it:

- `sys.settrace` names each project file whose code runs (a trace function called once per new code object:
  the project's code imported on first use, or found by a computed name, counts by its file's digest).
- An audit hook (`sys.addaudithook`) names each file opened and each folder listed, with its digest then.
- Reads of the process environment (`os.environ`, `os.environb`, `os.getenv`, `os.getenvb`, the mapping they
  share) are recorded by name, with a digest of the value (never the value).
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
    if "__pycache__" in path.parts and path.suffix == ".pyc":  # compiled bytecode: its source runs, recorded
        return None
    if path.is_relative_to(TORCHYARD) or any(path.is_relative_to(root) for root in (*STANDARD, *VOLATILE)):
        return None
    if any(path.is_relative_to(made) for made in _compiler_caches()):  # what the stack's compilers wrote
        return None
    if path.parent.name.startswith("torchinductor_") or any(
        part.startswith("torchinductor_") for part in path.relative_to(path.anchor).parts[:3]
    ):  # inductor's default folders under the temporary folder (`<tmp>/torchinductor_<user>`)
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
    return [Path(os.path.realpath(name)) for name in named if name]


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
# Set while the record's own code runs in this thread: what it reads itself (a path resolved, a variable looked
# up) is never the project's, and recording it would recurse.
_BUSY = threading.local()
# Reads outside any window, by the project file whose code made them (`start`), and why one could not be recorded
_AMBIENT: dict[str, set[tuple[str, str]]] = {}
_AMBIENT_UNKEEPABLE: dict[str, str] = {}
_AMBIENT_ON: list[bool] = []


def start() -> None:
    """Record the project's reads outside any window from now on, for the process (the run's start: before the
    project's conftest and cases are imported)."""
    _hooked()
    _AMBIENT_ON[:] = [True]


def _importing(frame: FrameType | None) -> list[str]:
    """The project modules being imported on the stack from `frame` up (each project frame that is a module's
    or a class's body, not a function's): the one that reads, and each that imports it (a package's
    `__init__` re-exporting what its submodule read, the model's module importing that). A read outside a window
    by a function alone is a backend's run of code its window recorded already."""
    found: list[str] = []
    while frame is not None:
        code = frame.f_code
        if not code.co_flags & inspect.CO_OPTIMIZED and (name := project_file(code.co_filename)) is not None:
            found.append(name)
        frame = frame.f_back
    return found


def _readers() -> list[str]:
    """Who a read outside any window belongs to: the modules this thread is importing, else, in another thread,
    those the main thread is importing (a thread a module's body starts and waits for reads on its behalf)."""
    found = _importing(sys._getframe(2))  # above this and its caller: torchyard's own frames
    main = threading.main_thread().ident
    if found or main is None or threading.get_ident() == main:
        return found
    return _importing(sys._current_frames().get(main))


def _ambient(kind: str, name: str) -> None:
    for reader in _readers():
        _AMBIENT.setdefault(reader, set()).add((kind, name))


def _ambient_refusal(why: str) -> None:
    for reader in _readers():
        _AMBIENT_UNKEEPABLE.setdefault(reader, why)


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if getattr(_BUSY, "on", False):
        return
    if not _ACTIVE:
        # the events it records first: reading a frame is an audit event of its own
        if _AMBIENT_ON and event in OUTSIDE_EVENTS and not _by_importlib(sys._getframe(1)):
            _BUSY.on = True
            try:
                _outside_windows(event, args)
            finally:
                _BUSY.on = False
        return
    _BUSY.on = True
    try:
        _in_window(_ACTIVE[-1], event, args, sys._getframe(1))
    finally:
        _BUSY.on = False


def _in_window(window: _Window, event: str, args: tuple[Any, ...], reader: FrameType | None) -> None:
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
        if found is not None and not _by_importlib(reader):  # the import system's own look at a folder on the path
            window.read("folder", found)
    elif event in UNRECORDABLE or event.startswith("os.exec"):
        window.refuse(f"{UNRECORDABLE.get(event, UNRECORDABLE['os.exec'])} ({event})")


OUTSIDE_EVENTS = frozenset(("open", "os.listdir", "os.scandir", "os.exec", "os.execve", *UNRECORDABLE))


def _outside_windows(event: str, args: tuple[Any, ...]) -> None:
    """What the project's code reads outside any window (`start`): files and folders by name, and what cannot be
    recorded. Only where the project's code is on the stack: torch, pytest and torchyard read on their own."""
    if event == "open":
        name = _path_of(args[0])
        if name is not None and not Path(name).is_absolute():
            if not os.path.lexists(name):  # relative to a folder descriptor, which the event does not carry
                _ambient_refusal(f"it opens {name!r} relative to a folder the record cannot name when imported")
                return
            name = os.path.abspath(name)  # noqa: PTH100 (as the open resolved it: against the working folder)
        if name is not None and _regular_or_absent(name):
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


def _by_importlib(frame: FrameType | None) -> bool:
    """Whether the read being audited (`frame`: the code that read) is the import system's own (a finder caching
    a folder's names, a loader reading a module's source): importlib's code, called by importlib's. A loader's
    `get_data` that the project calls (`pkgutil.get_data`, `__loader__.get_data`) reads the project's data."""
    caller = frame.f_back if frame is not None else None
    return all(
        found is not None and found.f_code.co_filename.startswith("<frozen importlib") for found in (frame, caller)
    )


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
    _record_the_environment()
    _record_metadata_reads()


def _variable_read(key: object) -> None:
    if not (_ACTIVE or _AMBIENT_ON) or getattr(_BUSY, "on", False) or not isinstance(key, (str, bytes)):
        return
    _BUSY.on = True
    try:
        name = os.fsdecode(key)
        if _ACTIVE:
            _ACTIVE[-1].read("variable", name)
        else:
            _ambient("variable", name)
    finally:
        _BUSY.on = False


def _environment_listed() -> None:
    if not (_ACTIVE or _AMBIENT_ON) or getattr(_BUSY, "on", False):
        return
    _BUSY.on = True
    try:
        if _ACTIVE:
            _ACTIVE[-1].refuse("it lists the whole environment (os.environ iterated)")
        else:
            _ambient_refusal("it lists the whole environment (os.environ iterated) when it is imported")
    finally:
        _BUSY.on = False


class _RecordedData(dict[bytes, bytes]):
    """The process environment's own mapping (`os.environ._data`, which `os.environb` shares), each read recorded
    by name: `os.environ`, `os.environb`, `os.getenv`, `os.getenvb` and the mapping itself all read through it."""

    def __getitem__(self, key: bytes) -> bytes:
        _variable_read(key)
        return super().__getitem__(key)

    def get(self, key: bytes, default: Any = None) -> Any:
        _variable_read(key)
        return super().get(key, default)

    def __contains__(self, key: object) -> bool:
        _variable_read(key)
        return super().__contains__(key)

    def __iter__(self) -> Iterator[bytes]:
        _environment_listed()
        return super().__iter__()

    def keys(self) -> Any:
        _environment_listed()
        return super().keys()

    def items(self) -> Any:
        _environment_listed()
        return super().items()

    def values(self) -> Any:
        _environment_listed()
        return super().values()

    def copy(self) -> dict[bytes, bytes]:
        _environment_listed()
        return dict(super().items())


_PLAIN_STAT = os.stat


def _stat_read(path: object) -> None:
    """A file's metadata looked at (`os.stat`: `os.path.exists`, `Path.is_file`), which raises no audit event:
    recorded as a read of the file (or the folder's listing), where the project's code looked."""
    if isinstance(path, int) or not (_ACTIVE or _AMBIENT_ON) or getattr(_BUSY, "on", False):
        return
    _BUSY.on = True
    try:
        name = os.path.abspath(os.fsdecode(path))  # type: ignore[arg-type]  # noqa: PTH100
        found = project_file(name)
        if found is None:
            return
        try:
            kind = "folder" if stat.S_ISDIR(_PLAIN_STAT(found).st_mode) else "file"
        except OSError:
            kind = "file"  # absent: that it is missing decided what the code did
        if _ACTIVE:
            if _importing_or_running(sys._getframe(2)):
                _ACTIVE[-1].read(kind, found)
        else:
            _ambient(kind, found)
    except (TypeError, ValueError):
        return
    finally:
        _BUSY.on = False


def _importing_or_running(frame: FrameType | None) -> bool:
    while frame is not None:
        if project_file(frame.f_code.co_filename) is not None:
            return True
        frame = frame.f_back
    return False


def _record_metadata_reads() -> None:
    """`os.stat` and `os.lstat` through `_stat_read` (the import system's own stats use `posix` directly)."""
    for name in ("stat", "lstat"):
        plain = getattr(os, name)

        def recorded(path: Any, *args: Any, _plain: Any = plain, **kwargs: Any) -> os.stat_result:
            if kwargs.get("dir_fd") is None:
                _stat_read(path)
            return _plain(path, *args, **kwargs)  # type: ignore[no-any-return]

        recorded.__wrapped__ = plain  # type: ignore[attr-defined]
        setattr(os, name, recorded)


def _record_the_environment() -> None:
    """Every read of the process environment through Python, recorded (`_RecordedData`)."""
    data = getattr(os.environ, "_data", None)
    if isinstance(data, dict) and not isinstance(data, _RecordedData):
        recorded = _RecordedData(data)
        os.environ._data = recorded  # type: ignore[attr-defined]
        if getattr(os, "environb", None) is not None and os.environb._data is data:  # type: ignore[attr-defined]
            os.environb._data = recorded  # type: ignore[attr-defined]


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
