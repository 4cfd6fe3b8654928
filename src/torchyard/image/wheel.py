"""The project's wheel, built in sealed containers: the host never runs the project's build backend.

A pull request controls its project's build backend (`backend-path = ["."]` is enough to run its own code),
so it runs in two containers of the entry's toolchain stage: `fetch` installs the `[build-system]` requirements
(read with tomllib, each a PEP 508 name handed to uv after `--`) as wheels only, with the network and no project
file; `build` runs the backend with no network, secret or capability, a read-only root, the source read-only
and one output folder, as an unprivileged user. That folder is counted while the backend writes it: past
`WHEEL_OUTPUT_LIMIT` the container is killed at once, and the build stops in one line. Only regular `*.whl` files
directly in that folder are taken, each streamed, never read whole into memory.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import sys
import tempfile
import threading
import tomllib
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement

from torchyard.errors import CommandError, ImageBuildError
from torchyard.image.source import ProjectFile, write_files
from torchyard.matrix.machine import Source, write_index_args
from torchyard.seal import Helper, run_sealed, run_user
from torchyard.util import proc
from torchyard.util.folders import folder_bytes

# PEP 517: a project without [build-system] is built by setuptools' legacy backend.
DEFAULT_REQUIRES = ("setuptools>=40.8.0",)
BUILDENV = "/opt/torchyard-build"
CA_TARGET = "/run/torchyard/cacert"
INDEX_ARGS_TARGET = "/run/torchyard/index-args"
FETCH_SCRIPT = (
    f"read -ra index < {INDEX_ARGS_TARGET}; uv venv --quiet --python /opt/torchyard/venv/bin/python {BUILDENV}/venv; "
    f"if [ $# -gt 0 ]; then uv pip install --quiet --no-config --only-binary :all: "
    f'--python {BUILDENV}/venv/bin/python "${{index[@]}}" -- "$@"; fi'
)
# What the build backend may write into its output folder (a wheel with CUDA kernels is hundreds of MB), and
# how often it is counted while it writes.
WHEEL_OUTPUT_LIMIT = 4 * 1024**3
WATCH_INTERVAL_S = 0.5
BUILD_SCRIPT = (
    f"cp -R /src /tmp/src; uv build --wheel --no-build-isolation --offline --no-config "
    f"--python {BUILDENV}/venv/bin/python --out-dir /out /tmp/src"
)


def build_requirements(files: Sequence[ProjectFile]) -> tuple[str, ...]:
    """`[build-system] requires` of the project's pyproject.toml, read without running anything (and from
    the project's files, so a pyproject.toml that is a link is never followed on the host)."""
    pyproject = next((item for item in files if item.path == "pyproject.toml"), None)
    if pyproject is None:
        return DEFAULT_REQUIRES
    if pyproject.mode == "link":
        raise ImageBuildError("the project's pyproject.toml is a link: torchyard reads only a regular file there")
    try:
        data = tomllib.loads(pyproject.data.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as error:
        raise ImageBuildError(f"the project's pyproject.toml cannot be read: {error}") from None
    system = data.get("build-system", {})
    requires = system.get("requires", list(DEFAULT_REQUIRES)) if isinstance(system, dict) else None
    if not isinstance(requires, list) or not all(isinstance(item, str) for item in requires):
        raise ImageBuildError("the project's pyproject.toml: [build-system] requires is not a list of strings")
    return tuple(_requirement(item) for item in requires)


def _requirement(item: str) -> str:
    """One build requirement, checked before any container starts: the fetch container has the network, so
    an item that uv would read as an option (`--find-links http://...`, `--no-binary`) or a URL would
    let the pull request choose what is downloaded and built there. Only a PEP 508 name from the entry's
    indexes passes (and it is handed over after `--`)."""
    where = f"the project's pyproject.toml: [build-system] requires item {item!r}"
    if item.lstrip().startswith("-"):
        raise ImageBuildError(f"{where} is an option, not a requirement; name a package (PEP 508)")
    try:
        requirement = Requirement(item)
    except InvalidRequirement:
        raise ImageBuildError(f"{where} is not a PEP 508 requirement") from None
    if requirement.url:
        raise ImageBuildError(f"{where} names a URL; build requirements come from the entry's indexes only")
    return item


def fetch_helper(
    image: str, *, name: str, user: str, buildenv: Path, index_file: Path, ca_bundle: Path | None,
    host_network: bool, requires: Sequence[str],
) -> Helper:  # fmt: skip
    """The container that installs the build requirements (wheels only) into `buildenv`: network, no source."""
    ca = () if ca_bundle is None else (
        "--mount", f"type=bind,source={ca_bundle},target={CA_TARGET},readonly",
        "--env", f"SSL_CERT_FILE={CA_TARGET}", "--env", "UV_NATIVE_TLS=1",
    )  # fmt: skip
    options = (
        *(("--network", "host") if host_network else ()),
        "--env", "HOME=/tmp", "--env", "UV_CACHE_DIR=/tmp/uv",
        "--mount", f"type=bind,source={buildenv},target={BUILDENV}",
        "--mount", f"type=bind,source={index_file},target={INDEX_ARGS_TARGET},readonly",
        *ca,
    )  # fmt: skip
    fetch = ("/bin/bash", "-e", "-c", FETCH_SCRIPT, "fetch", *requires)
    return Helper(f"{name}-fetch", user, image, fetch, options=options, network=True)


def build_helper(image: str, *, name: str, user: str, source: Path, buildenv: Path, out: Path) -> Helper:
    """The container that builds the wheel: no network, no secret, the source read-only, one output folder."""
    options = (
        "--env", "HOME=/tmp", "--env", "UV_CACHE_DIR=/tmp/uv",
        "--mount", f"type=bind,source={source},target=/src,readonly",
        "--mount", f"type=bind,source={buildenv},target={BUILDENV},readonly",
        "--mount", f"type=bind,source={out},target=/out",
    )  # fmt: skip
    return Helper(f"{name}-build", user, image, ("/bin/bash", "-e", "-c", BUILD_SCRIPT), options=options)


def _writable_by(folder: Path, user: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    uid, gid = (int(part) for part in user.split(":"))
    if os.getuid() == 0:
        os.chown(folder, uid, gid)
    return folder


def build_wheel_sealed(
    entry: str,
    files: Sequence[ProjectFile],
    target: Path,
    *,
    requires: Sequence[str],
    image: str,
    docker_path: str,
    sources: Sequence[Source],
    host_network: bool,
    ca_bundle: Path | None,
    runner: proc.Runner,
    env: Mapping[str, str],
) -> list[Path]:
    """Build the project's wheel from exactly `files` in two sealed containers of `image`; into `target`."""
    name = f"torchyard-wheel-{entry}-{os.urandom(4).hex()}"
    user = run_user(os.getuid(), os.getgid())  # as a test container runs: never root
    with tempfile.TemporaryDirectory(prefix="torchyard-wheel-") as scratch:
        source, buildenv, out = (Path(scratch) / part for part in ("source", "buildenv", "out"))
        index_file = Path(scratch) / "index-args"
        helpers = (
            fetch_helper(
                image, name=name, user=user, buildenv=buildenv, index_file=index_file, ca_bundle=ca_bundle,
                host_network=host_network, requires=requires,
            ),
            build_helper(image, name=name, user=user, source=source, buildenv=buildenv, out=out),
        )  # fmt: skip
        source.mkdir()
        write_files(files, source)
        source.chmod(0o755)
        _writable_by(buildenv, user)
        _writable_by(out, user)
        write_index_args(index_file, sources)
        print(
            f"building the project's wheel from {len(files)} files in a sealed container "
            f"(build requirements: {', '.join(requires)})",
            file=sys.stderr,
            flush=True,
        )
        try:
            run_sealed(helpers[0], docker_path=docker_path, runner=runner, env=env)
        except CommandError as error:
            raise ImageBuildError(
                f"entry {entry!r}: the project's build requirements did not install ({error})"
            ) from None
        kill = (docker_path, "kill", helpers[1].name)
        with bounded(out, WHEEL_OUTPUT_LIMIT, lambda: runner(kill, env=env, capture=True, check=False)) as past:
            try:
                run_sealed(helpers[1], docker_path=docker_path, runner=runner, env=env)
            except CommandError as error:
                if not past.is_set():
                    raise ImageBuildError(f"entry {entry!r}: the project's wheel did not build ({error})") from None
        if past.is_set():
            raise ImageBuildError(
                f"entry {entry!r}: the project's build wrote more than {WHEEL_OUTPUT_LIMIT // 1024**2} MiB into its "
                "output folder and was stopped; a wheel is far smaller"
            )
        wheels = take_wheels(out, target)
        if not wheels:
            raise ImageBuildError(f"entry {entry!r}: the project's build made no wheel")
        return wheels


@contextlib.contextmanager
def bounded(
    folder: Path, limit: int, stop: Callable[[], object], interval: float = WATCH_INTERVAL_S
) -> Iterator[threading.Event]:
    """While the block runs, `folder` is counted every `interval` seconds; past `limit` bytes `stop` is called
    once (it kills the writer) and the event yielded is set."""
    past, done = threading.Event(), threading.Event()

    def watch() -> None:
        while not done.wait(interval):
            if folder_bytes(folder) > limit:
                past.set()
                stop()
                return

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        yield past
    finally:
        done.set()
        watcher.join()
    if not past.is_set() and folder_bytes(folder) > limit:  # written faster than one count
        past.set()


def take_wheels(out: Path, target: Path, limit: int = WHEEL_OUTPUT_LIMIT) -> list[Path]:
    """Copy the regular `*.whl` files directly in `out` into `target`, each streamed (never read whole into
    memory) and at most `limit` bytes in all; links and the rest are ignored."""
    taken, left = [], limit
    for entry in sorted(os.scandir(out), key=lambda item: item.name):
        if not entry.name.endswith(".whl") or not stat.S_ISREG(entry.stat(follow_symlinks=False).st_mode):
            continue
        handle = os.open(entry.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        with os.fdopen(handle, "rb") as stream:
            opened = os.fstat(stream.fileno())
            if not stat.S_ISREG(opened.st_mode) or opened.st_size > left:
                raise ImageBuildError(f"the project's build left {entry.name!r}, not a wheel within its output's bound")
            with (target / entry.name).open("xb") as copy:
                shutil.copyfileobj(stream, copy)
            left -= opened.st_size
        taken.append(target / entry.name)
    return taken
