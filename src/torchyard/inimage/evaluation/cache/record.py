"""What a case's evaluation read while it ran, recorded and kept with each verdict it decides, so a replay is
proven, not guessed: on lookup every file, folder and variable the record names is read again, and any
difference is a miss.

The window is the making of the case's reference (its factory, and its forward and loss in eager), where the
project's code runs in plain Python; a second window without the trace function holds the backend's lowering
and run (what the project's code reads there, and its modules imported there). In them:

- `sys.settrace` names each project file whose code runs (a trace function called once per new code object:
  the project's code imported on first use, or found by a computed name, counts by its file's digest).
- An audit hook (`sys.addaudithook`) names each file opened (a SQLite database too) and each folder listed, with
  its digest then; `os.stat`, `os.lstat`, `os.access` and `os.readlink` name the file looked at, and the links
  on its way; an import that found nothing names the files that would have been the module, as absent.
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

A file or variable read by the project's code is also tied to every project file whose code is on the stack,
for the whole process: a later case whose window runs code of that file carries the read too, so a cache filled
by an earlier case's first call (an `lru_cache`, `linecache`) is still keyed. What a conftest's code reads is
every case's (`PROCESS`). The files the case's key holds already (its walk's, model by
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
import importlib.machinery
import inspect
import os
import stat
import sys
import sysconfig
import tempfile
import threading
from collections.abc import Callable, Collection, Iterator
from pathlib import Path
from types import CodeType, FrameType
from typing import Any, ParamSpec, TypeVar

from torchyard import contract
from torchyard.inimage.evaluation.cache.keys import installed_pin
from torchyard.inimage.evaluation.cache.project_code import TORCHYARD

P = ParamSpec("P")
R = TypeVar("R")
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
_TEMPORARY = tuple({Path(tempfile.gettempdir()).resolve(), Path("/tmp").resolve()})
# Reads the project's code made outside every case (a conftest's hook, a module a conftest imports): every case's
PROCESS = "*"
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

    def joined(self, other: Record) -> Record:
        """This record and `other` (the backend's run of the same case, read beside its reference) as one."""
        paths = {*self.ran, *other.ran}
        ran = {path: self.ran.get(path, frozenset()) | other.ran.get(path, frozenset()) for path in paths}
        return dataclasses.replace(
            self, files=self.files | other.files, folders=self.folders | other.folders,
            variables=self.variables | other.variables, unkeepable=self.unkeepable or other.unkeepable, ran=ran,
            ambient=other.ambient, ambient_unkeepable=other.ambient_unkeepable,
        )  # fmt: skip

    def beyond(self, keyed: Collection[str], models: Collection[str] = ()) -> Record:
        """The record without the files the case's key already holds (`keyed`: its walk's files, counted model
        by model), so that a change to another model of the same file moves no result of this case; a file whose
        code that ran includes a model the key left out (one the walk did not reach, `models` being those it
        reached as `module:qualname`: reached by a computed name, say) stays, whole."""
        held = {path for path in self.files if path in keyed and not _unkeyed_model_ran(path, self.ran, models)}
        files = {path: d for path, d in self.files.items() if path not in held}
        folders, variables, unkeepable = dict(self.folders), dict(self.variables), self.unkeepable
        # what their code read in any window or before one; and what code outside every case read (a conftest's
        # hook, a module a conftest imports): every case's
        for reader in [PROCESS, *sorted(set(self.ran) | set(keyed))]:
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
    """The file's bytes and executable bit; a link's target too (a link retargeted, or left dangling)."""
    digest = hashlib.sha256()
    try:
        if stat.S_ISLNK(_PLAIN_LSTAT(path).st_mode):
            digest.update(b"link:" + os.fsencode(_PLAIN_READLINK(path)) + b"\0")
    except (OSError, ValueError):
        return ABSENT
    try:
        digest.update(b"x" if _PLAIN_STAT(path).st_mode & 0o111 else b"-")
        digest.update(Path(path).read_bytes())
    except (OSError, ValueError):
        digest.update(b"absent")
    return digest.hexdigest()


def folder_digest(path: str) -> str:
    """The folder's entries: each one's name, kind, size and executable bit (what a listing's `DirEntry.stat`
    sees without an event)."""
    try:
        entries = []
        for entry in sorted(os.scandir(path), key=lambda found: found.name):
            info = entry.stat(follow_symlinks=False)
            size = 0 if stat.S_ISDIR(info.st_mode) else info.st_size
            entries.append(f"{entry.name}\0{stat.S_IFMT(info.st_mode)}\0{size}\0{info.st_mode & 0o111}")
    except (OSError, ValueError):
        return ABSENT
    return hashlib.sha256("\n".join(entries).encode(errors="surrogateescape")).hexdigest()


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
    if any(
        path.is_relative_to(temporary)
        and path.relative_to(temporary).parts[:1] != ()
        and path.relative_to(temporary).parts[0].startswith("torchinductor_")
        for temporary in _TEMPORARY
    ):  # inductor's default folders, directly under the temporary folder (`<tmp>/torchinductor_<user>`)
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
        # project_file first: it is no project's for the stack's own and its compilers' (most of what is mapped)
        if project_file(path) is not None and _on_path(path) and not any(Path(path).is_relative_to(c) for c in made)
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


class _Window:
    def __init__(self, *, project_only: bool = False) -> None:
        # Only what the project's code does (a backend's lowering: the stack's own files, compilers and
        # processes are no part of the case's record)
        self.project_only = project_only
        self.ran: set[CodeType] = set()  # the project's code that ran
        self.reads: set[tuple[str, str]] = set()  # ("file" | "folder" | "variable", name)
        self.unkeepable = ""
        self.seen: set[CodeType] = set()
        self.imported: set[str] = set()  # the project's modules imported in the window (by their files)

    def trace(self, frame: FrameType, event: str, arg: object) -> None:
        code = frame.f_code
        if code not in self.seen:
            self.seen.add(code)
            with _unrecorded():  # the path it resolves is the record's own look, no read of the project's
                if project_file(code.co_filename) is not None:
                    self.ran.add(code)

    def read(self, kind: str, name: str) -> None:
        """A read, also tied to every project file whose code is on the stack, for the process: a later case
        that runs code of any of those files, or whose key holds one, carries it (a cache one case filled)."""
        self.reads.add((kind, name))
        frame: FrameType | None = sys._getframe(2)
        while frame is not None:
            if (found := project_file(frame.f_code.co_filename)) is not None:
                _AMBIENT.setdefault(found, set()).add((kind, name))
            frame = frame.f_back

    def refuse(self, why: str, detail: str = "") -> None:
        self.unkeepable = self.unkeepable or f"{why}{detail}"

    def record(self) -> Record:
        native = project_libraries()
        if native:
            self.refuse(f"a native library of the project is loaded ({native[0]}): what it computes is not recorded")
        reads = set(self.reads)
        ran: dict[str, set[str]] = {path: {"<module>"} for path in self.imported}
        for code in self.ran:
            if (found := project_file(code.co_filename)) is not None:
                ran.setdefault(found, set()).add(getattr(code, "co_qualname", code.co_name))
        for path in ran:  # what code of the files that ran read in any window or at import (`beyond` too)
            reads |= _AMBIENT.get(path, set())
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
    for name in ("sitecustomize", "usercustomize"):  # the project's, run as Python started: before any record
        where = str(getattr(sys.modules.get(name), "__file__", None) or "")
        if not where or any(Path(os.path.abspath(where)).is_relative_to(folder) for folder in STANDARD):  # noqa: PTH100
            continue  # the system's own (Debian's links /etc/python3.X/sitecustomize.py into its standard library)
        found = project_file(where)
        if found is not None:
            _AMBIENT_UNKEEPABLE.setdefault(PROCESS, f"the project's {name} ran before the record started ({found})")


def _project_frames(frame: FrameType | None) -> tuple[list[str], bool, bool]:
    """One walk up the stack from `frame`: the project modules being imported (each project frame that is a
    module's or a class's body, not a function's: the one that reads, and each that imports it, a package's
    `__init__` re-exporting what its submodule read), whether any project code is on it at all, and whether a
    conftest's is (its import, a hook or a fixture it defines)."""
    importing: list[str] = []
    running = conftest = False
    while frame is not None:
        code = frame.f_code
        if (name := project_file(code.co_filename)) is not None:
            running = True
            conftest = conftest or name.endswith(f"{os.sep}conftest.py")
            if not code.co_flags & inspect.CO_OPTIMIZED:
                importing.append(name)
        frame = frame.f_back
    return importing, running, conftest


def _importing_or_running(frame: FrameType | None) -> bool:
    while frame is not None:
        if project_file(frame.f_code.co_filename) is not None:
            return True
        frame = frame.f_back
    return False


def _readers(frame: FrameType | None) -> list[str]:
    """Who a read outside any window, made from `frame`, belongs to: the modules this thread is importing, else,
    in another thread, those the main thread is importing (a thread a module's body starts and waits for reads
    on its behalf); what a conftest's code reads (its import, a module it imports, a hook or a fixture it
    defines and what they call) belongs to every case (`PROCESS`). None: no project code read, or only a
    function outside every import and conftest (a backend's run of a case, which its window records)."""
    found, running, conftest = _project_frames(frame)
    main = threading.main_thread().ident
    if not running and main is not None and threading.get_ident() != main:
        found, running, conftest = _project_frames(sys._current_frames().get(main))
    return [*found, PROCESS] if conftest else found


class _Readers:
    """Where a read outside any window goes: to each of `readers` (`_readers`), for the process; the window's
    own sink is the `_Window`."""

    def __init__(self, readers: list[str]) -> None:
        self.readers = readers

    def read(self, kind: str, name: str) -> None:
        for reader in self.readers:
            _AMBIENT.setdefault(reader, set()).add((kind, name))

    def refuse(self, why: str, detail: str = "") -> None:
        for reader in self.readers:
            _AMBIENT_UNKEEPABLE.setdefault(reader, f"{why} when it is imported{detail}")


def _sink(frame: FrameType | None, *, by_the_project: bool = False) -> _Window | _Readers | None:
    """Where a read made from `frame` is recorded: the innermost window (a backend's, or with `by_the_project`
    any, only where the project's code is on the stack), else the readers outside any window; None: no
    project code read."""
    if _ACTIVE:
        window = _ACTIVE[-1]
        return window if not (window.project_only or by_the_project) or _importing_or_running(frame) else None
    readers = _readers(frame)
    return _Readers(readers) if readers else None


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if getattr(_BUSY, "on", False):
        return
    if not _ACTIVE:
        # the events it records first: reading a frame is an audit event of its own
        if not (_AMBIENT_ON and event in OUTSIDE_EVENTS) or _by_importlib(sys._getframe(1)):
            return
    elif _ACTIVE[-1].project_only and event not in WINDOW_EVENTS:
        return  # a backend's window: most of a compile's events decided by name
    _BUSY.on = True  # before any path is resolved: a resolve stats, and the stat is the record's own
    try:
        if _ACTIVE and _ACTIVE[-1].project_only and not _may_be_the_projects(event, args):
            return  # a backend's window: a path no project's, decided before the stack is walked
        reader = sys._getframe(1)
        if (sink := _sink(reader)) is not None:
            _record_event(sink, event, args, reader)
    finally:
        _BUSY.on = False


def _may_be_the_projects(event: str, args: tuple[Any, ...]) -> bool:
    """Whether `_record_event` could record the event: false only for a named path that is no project's (a
    relative one may be a folder descriptor's, which it refuses)."""
    if event not in PATH_EVENTS or not args or isinstance(args[0], int):
        return True
    name = _path_of(args[0])
    if name is None:
        return args[0] is None  # a listing of the working folder
    return not os.path.isabs(name) or project_file(name) is not None  # noqa: PTH117 (no Path made per open)


def _record_event(sink: _Window | _Readers, event: str, args: tuple[Any, ...], reader: FrameType | None) -> None:
    """An audit event the project's code caused: files and folders read by name, and what cannot be recorded."""
    if event == "open":
        name = _path_of(args[0])
        if name is None:  # a file descriptor: opened before, by a path recorded then
            return
        if not Path(name).is_absolute():
            if not os.path.lexists(name):  # relative to a folder descriptor (`dir_fd`), which the event lacks
                sink.refuse(f"it opens {name!r} relative to a folder the record cannot name")
                return
            name = os.path.abspath(name)  # noqa: PTH100 (as the open resolved it: against the working folder)
        if _regular_or_absent(name) and (found := project_file(name)) is not None:
            sink.read("file", found)
            for link in _links(name):
                sink.read("file", link)
    elif event == "sqlite3.connect":
        name = _path_of(args[0]) if args else None
        if name is not None and (found := project_file(os.path.abspath(name))) is not None:  # noqa: PTH100
            sink.read("file", found)
    elif event in ("os.listdir", "os.scandir"):
        if args and isinstance(args[0], int):
            sink.refuse("it lists a folder by its descriptor, which the record cannot name")
            return
        found = project_file((_path_of(args[0]) if args else None) or ".")
        if found is not None and not _by_importlib(reader):  # the import system's own look at a folder on the path
            sink.read("folder", found)
    elif event in SETS_TRACE:
        if _importing_or_running(reader):
            sink.refuse(f"it sets a trace or profile function ({event}): what ran cannot be recorded")
    elif event in UNRECORDABLE or event.startswith("os.exec"):
        sink.refuse(UNRECORDABLE.get(event, UNRECORDABLE["os.exec"]), f" ({event})")


SETS_TRACE = ("sys.settrace", "sys.setprofile")
PATH_EVENTS = ("open", "os.listdir", "os.scandir", "sqlite3.connect")
OUTSIDE_EVENTS = frozenset((*PATH_EVENTS, "os.exec", "os.execve", *UNRECORDABLE))
WINDOW_EVENTS = OUTSIDE_EVENTS | frozenset(SETS_TRACE)


def _by_importlib(frame: FrameType | None) -> bool:
    """Whether the read being audited (`frame`: the code that read) is the import system's own (a finder caching
    a folder's names, a loader reading a module's source): importlib's code, called by importlib's. A loader's
    `get_data` that the project calls (`pkgutil.get_data`, `__loader__.get_data`) reads the project's data."""
    caller = frame.f_back if frame is not None else None
    return all(
        found is not None and found.f_code.co_filename.startswith("<frozen importlib") for found in (frame, caller)
    )


def _links(name: str) -> list[str]:
    """The links on `name`'s way, each by its own path (its digest holds its target): a link the project
    retargets changes what is read with no change to what it pointed at before."""
    found = []
    path = os.path.abspath(name)  # noqa: PTH100
    while path != os.path.dirname(path):  # noqa: PTH120
        try:
            if stat.S_ISLNK(_PLAIN_LSTAT(path).st_mode) and project_file(os.path.dirname(path)) is not None:  # noqa: PTH120
                found.append(path)
        except OSError:
            pass
        path = os.path.dirname(path)  # noqa: PTH120
    return found


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
    sys.meta_path.append(_AbsentModules())


class _AbsentModules:
    """Last on `sys.meta_path`, asked only where no finder found a module the project's code imports: each file
    that would have been it, in each project folder it was looked for in, recorded as absent (an optional module
    the project adds later, `try: import ... except ImportError`)."""

    def find_spec(self, name: str, path: Collection[str] | None = None, target: object = None) -> None:
        if not (_ACTIVE or _AMBIENT_ON) or getattr(_BUSY, "on", False):
            return
        _BUSY.on = True
        try:
            # only where the project's code looks: not torch's or a library's optional module
            if (sink := _sink(sys._getframe(1), by_the_project=True)) is None:
                return
            last = name.rpartition(".")[2]
            for folder in path if path is not None else sys.path:
                found = project_file(os.path.abspath(folder or "."))  # noqa: PTH100
                if found is None or not os.path.isdir(found) or Path(found) in _site_folders():  # noqa: PTH112
                    continue
                for suffix in ("", *importlib.machinery.all_suffixes()):  # a package's folder, a module's file
                    sink.read("file", os.path.join(found, last + suffix))  # noqa: PTH118
        except (TypeError, ValueError, OSError):
            return
        finally:
            _BUSY.on = False


@functools.cache
def _site_folders() -> frozenset[Path]:
    """Where distributions are installed: their modules count by version, not by a listing."""
    import site

    named = [*site.getsitepackages(), site.getusersitepackages(), *sysconfig.get_paths().values()]
    return frozenset(Path(folder).resolve() for folder in named)


def _variable_read(key: object) -> None:
    if not (_ACTIVE or _AMBIENT_ON) or getattr(_BUSY, "on", False) or not isinstance(key, (str, bytes)):
        return
    _BUSY.on = True
    try:
        if (sink := _sink(sys._getframe(1))) is not None:
            sink.read("variable", os.fsdecode(key))
    finally:
        _BUSY.on = False


def _environment_listed() -> None:
    if not (_ACTIVE or _AMBIENT_ON) or getattr(_BUSY, "on", False):
        return
    _BUSY.on = True
    try:
        if (sink := _sink(sys._getframe(1))) is not None:
            sink.refuse("it lists the whole environment (os.environ iterated)")
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


_PLAIN_STAT, _PLAIN_LSTAT, _PLAIN_READLINK = os.stat, os.lstat, os.readlink
METADATA_READS = ("stat", "lstat", "access", "readlink")


def _stat_read(path: object, by_descriptor: bool = False) -> None:
    """A file's metadata looked at (`os.stat`: `os.path.exists`, `Path.is_file`; `os.access`, `os.readlink`),
    which raises no audit event: recorded as a read of the file (or the folder's listing), and of each link on
    its way, where the project's code looked. One relative to a folder's descriptor cannot be named."""
    if isinstance(path, int) or not (_ACTIVE or _AMBIENT_ON) or getattr(_BUSY, "on", False):
        return
    _BUSY.on = True
    try:
        caller = sys._getframe(2)
        if _ACTIVE and _ACTIVE[-1].project_only and not by_descriptor and not _may_be_the_projects("open", (path,)):
            return  # a backend's window: a path no project's, decided before the stack is walked
        # only where the project's code looked; one walk, before any path is resolved
        if (sink := _sink(caller, by_the_project=True)) is None:
            return
        if by_descriptor:
            sink.refuse("it looks at a file relative to a folder's descriptor, which the record cannot name")
            return
        name = os.path.abspath(os.fsdecode(path))  # type: ignore[arg-type]  # noqa: PTH100
        found = project_file(name)
        if found is None:
            return
        try:
            kind = "folder" if stat.S_ISDIR(_PLAIN_STAT(found).st_mode) else "file"
        except OSError:
            kind = "file"  # absent: that it is missing decided what the code did
        for read_kind, read in [(kind, found), *(("file", link) for link in _links(name))]:
            sink.read(read_kind, read)
    except (TypeError, ValueError):
        return
    finally:
        _BUSY.on = False


def _record_metadata_reads() -> None:
    """`METADATA_READS` through `_stat_read` (the import system's own stats use `posix` directly)."""
    for name in METADATA_READS:
        plain = getattr(os, name)

        def recorded(path: Any, *args: Any, _plain: Any = plain, **kwargs: Any) -> Any:
            _stat_read(path, by_descriptor=kwargs.get("dir_fd") is not None)
            return _plain(path, *args, **kwargs)

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


def quiet(function: Callable[P, R]) -> Callable[P, R]:
    """`function` is torchyard's own reading of the project (its key, a kept record): never a read of the
    project's, and with no stack walked per file it stats."""

    @functools.wraps(function)
    def unrecorded(*args: P.args, **kwargs: P.kwargs) -> R:
        with _unrecorded():
            return function(*args, **kwargs)

    return unrecorded


@contextlib.contextmanager
def _unrecorded() -> Iterator[None]:
    """The record's own work in this thread (`_BUSY`), as it was before once done: nothing it reads is recorded."""
    busy = getattr(_BUSY, "on", False)
    _BUSY.on = True
    try:
        yield
    finally:
        _BUSY.on = busy


@contextlib.contextmanager
def recording(*, trace: bool = True) -> Iterator[list[Record]]:
    """A window: what runs in it is recorded; the record is in the yielded list once the window closes. Without
    `trace` (a backend's lowering and run, which a trace function would slow twofold) the window records what is
    read and the project's modules imported in it, not each function that ran."""
    _hooked()
    window = _Window(project_only=not trace)
    done: list[Record] = []
    previous = sys.gettrace()
    if trace and previous is not None:
        window.refuse("a trace function is already set (a debugger or coverage): what ran cannot be recorded")
    loaded = set(sys.modules)
    _ACTIVE.append(window)
    if trace and previous is None:
        with _unrecorded():  # its own trace function is no project's
            sys.settrace(window.trace)
            threading.settrace(window.trace)  # the threads the window starts (a pool made before it is not traced)
    try:
        yield done
    finally:
        if trace and previous is None:
            with _unrecorded():
                sys.settrace(None)
                threading.settrace(None)
        _ACTIVE.pop()
        for name in set(sys.modules) - loaded:  # imported here: by a computed name, on a thread made before
            found = project_file(str(getattr(sys.modules.get(name), "__file__", None) or ""))
            if found is not None:
                window.imported.add(found)
        done.append(window.record())
