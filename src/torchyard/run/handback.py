"""The reports folder, treated as written by hostile code: one run at a time per folder, an empty folder
at the start, and nothing followed on the way back (links are removed, never chowned or read through).

A test in the container can create `reports/x -> /etc/shadow`; a root caller that followed it would hand
a host file to the container's user or copy it into a public step summary. It can also leave a chain of
folders thousands deep, thousands of entries, or gigabytes: the walk is iterative through folder
descriptors (at most MAX_DEPTH open at once, no path ever resolved), what lies deeper is removed, and more
than the machine's `reports` limit fails the run with the folder emptied. Removal flattens a tree into its
top folder as it goes, so no depth or width can exhaust the stack or the descriptors.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import signal
import stat
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from torchyard import contract
from torchyard.errors import TorchyardError, UsageError
from torchyard.util.checkout import linked_component
from torchyard.util.markdown import append_step_summary

MAX_DEPTH = 32
DIRECTORY_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW


class HandBackError(TorchyardError):
    """The reports could not be handed back whole and safe; the folder was emptied."""


def _usable_folder(path: Path) -> None:
    """No link on the way to `path` from the checkout down, and no file in its place: a committed
    `reports -> /somewhere` is refused, never followed."""
    link = linked_component(path)
    if link is not None:
        raise UsageError(
            f"reports folder {path}: {link} is a symbolic link (committed?): refusing to write through it; remove "
            "it, or pass --reports PATH outside the checkout"
        )
    if path.exists() and not path.is_dir():
        raise UsageError(f"reports folder {path} is a file, not a folder: pass --reports PATH")


def reports_folder(reports: Path, name: str) -> Path:
    """`reports/<name>` as an absolute path, never resolved through a link (a link on the way is refused)."""
    folder = Path(os.path.abspath(reports / name))  # noqa: PTH100 (never resolved through a link)
    _usable_folder(folder)
    lock = _lock_of(folder)
    if lock.is_symlink() or lock.is_dir():  # refused now, before any build: the run would stop there
        raise UsageError(_LOCK_REFUSED.format(lock=lock, why="a link or folder"))
    return folder


_LOCK_REFUSED = "{lock}: cannot hold the run's lock ({why}): a link or folder there is refused"


def _lock_of(path: Path) -> Path:
    return path.parent / f".{path.name}.lock"


@contextmanager
def exclusive_run(path: Path) -> Iterator[None]:
    """Hold `<path>.lock` for the run: a second run of the same entry on this machine waits its turn."""
    _usable_folder(path.parent)
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = _lock_of(path)
    try:
        handle = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK, 0o644)
    except OSError as error:  # a link committed in its place (ELOOP), or a folder
        raise UsageError(_LOCK_REFUSED.format(lock=lock, why=error.strerror)) from None
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"torchyard: another run is writing {path}; waiting for it to finish", file=sys.stderr, flush=True)
            fcntl.flock(handle, fcntl.LOCK_EX)
        yield
    finally:
        os.close(handle)


def previous_of(path: Path) -> Path:
    """Where a run keeps the previous run's reports: beside them, hidden, so no report reads them as a run."""
    return path.parent / f".{path.name}.previous"


def fresh_folder(path: Path) -> None:
    """An empty folder at `path`. What the previous run left there is moved to `previous_of(path)` (the one
    before it removed), so nothing a user has not read is gone when the next run starts; no link is followed."""
    _usable_folder(path)
    if not path.exists():
        path.mkdir(parents=True)
        return
    with os.scandir(path) as children:
        names = [child.name for child in children]
    if not names:
        return
    previous = previous_of(path)
    _usable_folder(previous)
    if previous.exists():
        empty_folder(previous)
    else:
        previous.mkdir()
    source, target = os.open(path, DIRECTORY_FLAGS), os.open(previous, DIRECTORY_FLAGS)
    try:
        for name in names:
            os.rename(name, name, src_dir_fd=source, dst_dir_fd=target)
    finally:
        os.close(source)
        os.close(target)


def _remove_entry(parent: int, name: str, holding: int, counter: list[int]) -> None:
    """Remove `name` in the folder `parent`: a folder's subfolders are first moved up into `holding` (under
    unique names) and removed in turn, so nothing is ever deeper than one level."""
    pending = [(parent, name)]
    while pending:
        folder, entry = pending.pop()
        try:
            os.unlink(entry, dir_fd=folder)
            continue
        except IsADirectoryError:
            pass
        except PermissionError:  # Linux says EPERM, not EISDIR, for unlink on a folder
            if not stat.S_ISDIR(os.stat(entry, dir_fd=folder, follow_symlinks=False).st_mode):
                raise
        # A folder the run made unlistable or read-only (0300, 0500: its owner's own on a runner that is not
        # root) is given back to its owner first; nothing writes while the reports are removed.
        with contextlib.suppress(OSError):
            os.chmod(entry, 0o700, dir_fd=folder)
        handle = os.open(entry, DIRECTORY_FLAGS, dir_fd=folder)
        try:
            with os.scandir(handle) as children:
                names = [(child.name, child.is_dir(follow_symlinks=False)) for child in children]
            for child, is_folder in names:
                if is_folder:
                    counter[0] += 1
                    moved = f".torchyard-removing-{counter[0]}"
                    os.rename(child, moved, src_dir_fd=handle, dst_dir_fd=holding)
                    pending.append((holding, moved))
                else:
                    os.unlink(child, dir_fd=handle)
        finally:
            os.close(handle)
        os.rmdir(entry, dir_fd=folder)


def empty_folder(path: Path) -> None:
    """Remove everything in `path` (the folder itself stays), whatever its depth; no link is followed."""
    top = os.open(path, DIRECTORY_FLAGS)
    try:
        with os.scandir(top) as children:
            names = [child.name for child in children]
        counter = [0]
        for name in names:
            _remove_entry(top, name, top, counter)
    finally:
        os.close(top)


def hand_back(path: Path, uid: int, gid: int, *, limit_bytes: int | None = None) -> list[str]:
    """Remove every link and special file under `path` and everything deeper than MAX_DEPTH folders, then
    give the rest to uid:gid without following anything. Returns what was removed, relative to `path`.

    Fails closed: an error on the way, or more than `limit_bytes` of files, empties the folder and raises
    `HandBackError`."""
    removed: list[str] = []
    total = 0
    top = os.open(path, DIRECTORY_FLAGS)
    counter = [0]
    stack: list[tuple[int, Iterator[os.DirEntry[str]], str, int]] = []
    try:
        stack.append((top, _entries(top), "", 0))
        while stack:
            handle, children, prefix, depth = stack[-1]
            child = next(children, None)
            if child is None:
                if handle != top:
                    os.close(handle)
                stack.pop()
                continue
            relative = prefix + child.name
            mode = child.stat(follow_symlinks=False).st_mode
            if stat.S_ISDIR(mode) and depth + 1 > MAX_DEPTH:
                _remove_entry(handle, child.name, top, counter)
                removed.append(f"{relative} (deeper than {MAX_DEPTH} folders)")
            elif stat.S_ISDIR(mode):
                os.chown(child.name, uid, gid, dir_fd=handle, follow_symlinks=False)
                inner = os.open(child.name, DIRECTORY_FLAGS, dir_fd=handle)
                stack.append((inner, _entries(inner), relative + "/", depth + 1))
            elif stat.S_ISREG(mode):
                total += child.stat(follow_symlinks=False).st_size
                os.chown(child.name, uid, gid, dir_fd=handle, follow_symlinks=False)
            else:
                os.unlink(child.name, dir_fd=handle)
                removed.append(relative)
        os.fchown(top, uid, gid)
    except OSError as error:
        _give_up(path, stack, top)
        raise HandBackError(f"the reports in {path} could not be handed back ({error.strerror}): emptied") from None
    finally:
        os.close(top)
    if limit_bytes is not None and total > limit_bytes:
        empty_folder(path)
        raise HandBackError(
            f"the run left {total / 1e6:.0f} MB in {path}, over this machine's {limit_bytes / 1e6:.0f} MB for "
            "reports (machine.toml [limits] reports): emptied"
        )
    return removed


def _entries(handle: int) -> Iterator[os.DirEntry[str]]:
    with os.scandir(handle) as children:
        return iter(list(children))


def _give_up(path: Path, stack: list[tuple[int, Iterator[os.DirEntry[str]], str, int]], top: int) -> None:
    for handle, _, _, _ in stack:
        if handle != top:
            os.close(handle)
    stack.clear()
    try:
        empty_folder(path)
    except OSError as error:
        raise HandBackError(f"the reports in {path} could not be vetted nor emptied ({error.strerror})") from None


def read_report(path: Path) -> str | None:
    """A report file's text, only if it is a regular file (never through a link); None when absent;
    `HandBackError` past `contract.MAX_REPORT_BYTES` (the host would hold many times its size to stamp it)."""
    try:
        handle = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as error:
        if error.errno in (errno.ENOENT, errno.ELOOP):
            return None
        raise
    with os.fdopen(handle, "rb") as stream:
        info = os.fstat(stream.fileno())
        if not stat.S_ISREG(info.st_mode):
            return None
        if info.st_size > contract.MAX_REPORT_BYTES:
            bound = contract.MAX_REPORT_BYTES >> 20
            raise HandBackError(f"{path.name} is larger than {bound} MiB: no report torchyard wrote")
        return stream.read(contract.MAX_REPORT_BYTES + 1).decode("utf-8", errors="replace")


def summarize(report_dir: Path, env: Mapping[str, str]) -> None:
    """A run's parity table into GitHub's step summary (the one place that appends it), read as a report."""
    table = read_report(report_dir / contract.PARITY_MARKDOWN)
    if table is not None:
        append_step_summary(table, env)


# The signals a native crash ends a process with (a runtime's assert aborts; a bad access faults); SIGKILL is
# the kernel's out-of-memory kill or a stop from outside, which the callers say apart.
CRASHES = (signal.SIGSEGV, signal.SIGABRT, signal.SIGBUS, signal.SIGFPE, signal.SIGILL, signal.SIGTRAP)


def crash_note(path: Path, status: int, *, in_container: bool) -> str | None:
    """Where the tests' process died of a crash signal (a status of -N from Python's subprocess, 128+N from a
    container's shell), the signal and the test it was in (`contract.RUNNING`, written by the run: read as
    hostile text); None for any other status."""
    number = -status if status < 0 else status - 128 if in_container and status > 128 else 0
    crash = next((candidate for candidate in CRASHES if candidate == number), None)
    if crash is None:
        return None
    text = ""
    with contextlib.suppress(HandBackError):  # a name past the bound names no test
        text = read_report(path / contract.RUNNING) or ""
    test = "".join(character for character in text.strip() if character.isprintable())[:300]
    said = f"the tests' process died of {crash.name}{f' in {test}' if test else ''}: a native crash (a backend's "
    said += "runtime or a compiled library it loads), so the run wrote no report"
    return said + ("; run that test alone to see its output" if test else "")
