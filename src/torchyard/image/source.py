"""The project's files as the host reads them: the one gate, and it never follows a link.

Every file of a pull request's checkout is hostile, links included: a committed link to /proc/self/environ
or ~/.ssh/id_rsa must never be read on the host. So what git tracks is read as git objects (`git ls-files
-s` names each file's mode and blob, `git cat-file --batch` hands over the blobs), and what git does not
(new files it does not ignore, tracked files changed in the work tree, everything outside a git work
tree) is read one path component at a time with O_NOFOLLOW, regular files only. A link is carried as a
link (its target text) and written out as a symlink, as git checks it out; submodules are left out. git
runs only through `torchyard.util.git`, on the checkout's own git dir, never one found in the project.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from torchyard.errors import CommandError, CommandNotFoundError, ImageBuildError
from torchyard.util import proc
from torchyard.util.git import Checkout, filter_drivers, find_checkout, git

Mode = Literal["file", "executable", "link"]
# git's modes; 160000 (a submodule: another repository's commit) is not a file of this project.
GIT_MODES: dict[str, Mode] = {"100644": "file", "100755": "executable", "120000": "link"}
SUBMODULE = "160000"


@dataclass(frozen=True)
class ProjectFile:
    """One file of the project: its path (relative, `/`-separated), its mode, and its bytes (a link's
    bytes are its target, never what it points at)."""

    path: str
    mode: Mode
    data: bytes


def _split(listing: bytes) -> list[str]:
    return [os.fsdecode(item) for item in listing.split(b"\0") if item]


def _check_path(path: str) -> str:
    """A path git or the walk gave: relative and inside the project, or the build stops."""
    parts = path.split("/")
    if path.startswith("/") or any(part in ("", ".", "..") for part in parts):
        raise ImageBuildError(f"the project's file {path!r} is not a plain relative path")
    return path


def _objects(
    checkout: Checkout, blobs: Sequence[tuple[str, str]], runner: proc.DataRunner, drivers: Sequence[str]
) -> list[bytes]:
    """The contents of `blobs` (each file's path and blob), in order, from one `git cat-file --batch`."""
    if not blobs:
        return []
    asked = "".join(f"{blob}\n" for _, blob in blobs).encode()
    output = git(checkout, ["cat-file", "--batch"], stdin=asked, runner=runner, drivers=drivers)
    contents, position = [], 0
    for path, blob in blobs:
        end = output.index(b"\n", position)
        header = output[position:end].split(b" ")
        if header == [blob.encode(), b"missing"]:  # a partial or damaged clone: the index names what it lacks
            raise ImageBuildError(
                f"the project's file {path!r} is tracked by git, but the repository lacks its content (object "
                f"{blob[:12]}: a partial or shallow clone?): fetch it (`git fetch`), or stop tracking it "
                f"(`git rm --cached {path}`)"
            )
        if len(header) != 3 or header[0].decode() != blob or header[1] != b"blob":
            raise ImageBuildError(f"git cat-file: unexpected answer for {path!r} ({blob}): {output[position:end]!r}")
        size = int(header[2])
        contents.append(output[end + 1 : end + 1 + size])
        position = end + 1 + size + 1  # the blob, then a newline
    return contents


def read_nofollow(root: Path, path: str) -> ProjectFile | None:
    """`path` under `root` read without following any link on the way (a link at the end is read as a
    link); None when it is gone, not a regular file or link, or reached through a link."""
    parts = _check_path(path).split("/")
    directory = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for part in parts[:-1]:
            inner = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=directory)
            os.close(directory)
            directory = inner
        info = os.stat(parts[-1], dir_fd=directory, follow_symlinks=False)
        if stat.S_ISLNK(info.st_mode):
            return ProjectFile(path, "link", os.fsencode(os.readlink(parts[-1], dir_fd=directory)))
        if not stat.S_ISREG(info.st_mode):
            return None
        # O_NONBLOCK: a FIFO swapped in after the stat must not hang the read; fstat checks what was opened.
        handle = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=directory)
        with os.fdopen(handle, "rb") as stream:
            opened = os.fstat(stream.fileno())
            if not stat.S_ISREG(opened.st_mode):
                return None
            data = stream.read()
        return ProjectFile(path, "executable" if opened.st_mode & stat.S_IXUSR else "file", data)
    except OSError as error:
        if error.errno in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP):
            return None
        raise ImageBuildError(f"the project's file {path!r} cannot be read: {error.strerror}") from None
    finally:
        os.close(directory)


def _walk(root: Path, prefix: str = "") -> Iterator[str]:
    """Every path under `root` that is not a folder, links included and never entered."""
    with os.scandir(root / prefix if prefix else root) as found:
        entries = sorted(found, key=lambda entry: entry.name)
    for entry in entries:
        relative = f"{prefix}{entry.name}"
        if entry.is_dir(follow_symlinks=False):
            yield from _walk(root, relative + "/")
        else:
            yield relative


def _under(listing: bytes, prefix: str) -> list[str]:
    """git's full names (from the top) as paths below the project folder `prefix` (`.`: the top)."""
    names = _split(listing)
    if prefix == ".":
        return names
    return [name.removeprefix(prefix + "/") for name in names if name.startswith(prefix + "/")]


def _git_files(root: Path, runner: proc.DataRunner) -> list[ProjectFile] | None:
    """What git tracks (from its objects) and what it does not ignore (read without following links);
    None outside a git work tree."""
    checkout = find_checkout(root)
    if checkout is None:
        return None
    prefix = checkout.relative(root)
    listing = ["ls-files", "-z", "--full-name"]
    drivers = filter_drivers(checkout, runner=runner)  # once for the four calls below
    try:
        staged = git(checkout, [*listing, "-s", "--", prefix], runner=runner, drivers=drivers)
        modified = git(checkout, [*listing, "--modified", "--", prefix], runner=runner, drivers=drivers)
        changed = set(_under(modified, prefix))
        unseen = git(
            checkout, [*listing, "--others", "--exclude-standard", "--", prefix], runner=runner, drivers=drivers
        )
        others = _under(unseen, prefix)
    except (CommandError, CommandNotFoundError):
        return None
    tracked: list[tuple[str, Mode, str]] = []
    for record in _split(staged):
        info, _, full = record.partition("\t")
        if prefix != "." and not full.startswith(prefix + "/"):
            continue
        path = full if prefix == "." else full.removeprefix(prefix + "/")
        mode, blob, stage = info.split(" ")
        # An unmerged path (stage 1-3) has no one content; a submodule is another repository.
        if stage != "0" or mode == SUBMODULE or path in changed:
            continue
        tracked.append((_check_path(path), GIT_MODES.get(mode, "file"), blob))
    files = [
        ProjectFile(path, mode, data)
        for (path, mode, _), data in zip(
            tracked, _objects(checkout, [(p, b) for p, _, b in tracked], runner, drivers), strict=True
        )
    ]
    read = (read_nofollow(root, path) for path in sorted(changed | set(others)))
    return [*files, *(item for item in read if item is not None)]


def read_project(root: Path, runner: proc.DataRunner = proc.data) -> tuple[ProjectFile, ...]:
    """The project's files, sorted by path: git's view inside a work tree, else every file under `root`."""
    files = _git_files(root, runner)
    if files is None:
        read = (read_nofollow(root, path) for path in _walk(root))
        files = [item for item in read if item is not None]
    return tuple(sorted(files, key=lambda item: item.path))


def write_files(files: Iterable[ProjectFile], target: Path) -> None:
    """Write `files` under `target` (a folder torchyard made): regular files first, then the links, so no
    file is ever written through a link; a link is recreated as it is, never resolved."""
    ordered = sorted(files, key=lambda item: (item.mode == "link", item.path))
    for item in ordered:
        path = target / _check_path(item.path)
        path.parent.mkdir(parents=True, exist_ok=True)
        if item.mode == "link":
            path.symlink_to(os.fsdecode(item.data))
            continue
        path.write_bytes(item.data)
        path.chmod(0o755 if item.mode == "executable" else 0o644)
