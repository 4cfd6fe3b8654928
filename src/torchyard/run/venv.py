"""Run an entry's suites on this machine, no Docker: a venv made from the entry's lockfile, with
torchyard's in-image side on a path entry and the project installed from a wheel (a source folder on a path
entry of its own), as in the image."""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from torchyard import contract
from torchyard.errors import CommandError, ImageBuildError
from torchyard.image.context import inimage_files, project_files
from torchyard.image.source import ProjectFile, write_files
from torchyard.lock.check import require_fresh
from torchyard.lock.install import sync_args
from torchyard.lock.lockfile import lock_path
from torchyard.lock.resolve import uv_version
from torchyard.matrix.machine import Machine, Source, index_args
from torchyard.matrix.schema import Entry
from torchyard.run.environment import entry_environment
from torchyard.run.handback import reports_folder
from torchyard.run.interpreter import run_suites
from torchyard.run.scopes import local_cache
from torchyard.trust import level_of
from torchyard.util import proc
from torchyard.util.atomic import write_atomically

VENVS = Path(".torchyard") / "venvs"
SYNC_STAMP = ".torchyard-synced"  # in the venv: the sha256 of the lock last synced into it, bytecode and all


def sync_venv(
    venv: Path,
    lockfile: Path,
    sources: Sequence[Source],
    *,
    find_links: Sequence[str],
    index_strategy: str,
    runner: proc.Runner,
    env: Mapping[str, str],
) -> None:
    """The venv made exactly the lock. The first sync of a lock compiles every module's bytecode; a sync
    of the lock the venv already has checks it offline (nothing to compile, no index asked about every
    package: seconds on a slow link). Only where the venv was changed by hand and uv's cache lacks a wheel
    does that fail: the sync then goes online (a package reinstalled so gets its bytecode at its first
    import, where the run may write it)."""
    stamp, digest = venv / SYNC_STAMP, hashlib.sha256(lockfile.read_bytes()).hexdigest()
    # A stamp that is a link is not this venv's own: it is never read, and the write below replaces it.
    again = stamp.is_file() and not stamp.is_symlink() and stamp.read_text().strip() == digest

    def sync(*, compile_bytecode: bool, offline: bool = False) -> tuple[str, ...]:
        return sync_args(
            lockfile, str(venv / "bin" / "python"), sources, find_links=find_links, index_strategy=index_strategy,
            compile_bytecode=compile_bytecode, offline=offline,
        )  # fmt: skip

    if again:
        if runner(sync(compile_bytecode=False, offline=True), env=env, capture=True, check=False).returncode == 0:
            return
        print(
            "the venv differs from its lock, and uv's cache cannot make it up offline: syncing online", file=sys.stderr
        )
    runner(sync(compile_bytecode=not again), env=env)
    write_atomically(stamp, digest + "\n")  # never through a link planted where the stamp goes


def stage_inimage(venv: Path, python: str, source: Path | None = None) -> Path:
    """Copy torchyard's in-image files beside the venv and put them on its path, and a source folder after
    them (as the image does: its files are the workspace there, here they are the checkout's own)."""
    target = venv / "torchyard-inimage"
    shutil.rmtree(target, ignore_errors=True)
    for name, node in inimage_files():
        path = target / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(node.read_bytes())
    site_packages = venv / "lib" / f"python{python}" / "site-packages"
    paths = [target.resolve(), *([source.resolve()] if source is not None else [])]
    (site_packages / "torchyard.pth").write_text("".join(f"{path}\n" for path in paths))
    return target


def wheel_build_args(source: Path, out_dir: Path, sources: Sequence[Source]) -> tuple[str, ...]:
    """`uv build --wheel` for the project on this host (unsandboxed: `--local` and native entries only); its
    build backend comes from the entry's indexes. Image builds use `torchyard.image.wheel`, sealed."""
    return ("uv", "build", "--wheel", "--no-config", "--out-dir", str(out_dir), *index_args(sources), str(source))


def build_project_wheel(
    entry: str,
    files: Sequence[ProjectFile],
    out_dir: Path,
    sources: Sequence[Source],
    *,
    runner: proc.Runner,
    env: Mapping[str, str],
) -> list[Path]:
    """Build the project's wheel from exactly `files` (its source, written aside) into `out_dir`."""
    with tempfile.TemporaryDirectory(prefix="torchyard-project-") as scratch:
        source = Path(scratch)
        write_files(files, source)
        print(f"building the project's wheel from {len(files)} files", file=sys.stderr, flush=True)
        try:
            runner(wheel_build_args(source, out_dir, sources), env={**env, "UV_NO_PROGRESS": "1"})
        except CommandError as error:
            raise ImageBuildError(f"entry {entry!r}: the project's wheel did not build ({error})") from None
    return sorted(out_dir.glob("*.whl"))


def run_local(
    entry: Entry,
    lockdir: Path,
    reports: Path,
    extra: Sequence[str],
    *,
    machine: Machine,
    runner: proc.Runner = proc.run,
    env: Mapping[str, str] = os.environ,
) -> int:
    """Check the lock, sync `.torchyard/venvs/<entry>` to it (through this `machine`'s mirrors and wheel
    folders), add torchyard and the project, run the suites."""
    require_fresh(entry, lockdir, uv_version(runner))
    lockfile = lock_path(lockdir, entry)
    venv = VENVS / entry.name
    python = venv / "bin" / "python"
    uv_env = {**env, "UV_PYTHON_DOWNLOADS": "never", "UV_NO_PROGRESS": "1"}
    if not python.exists():
        runner(["uv", "venv", "--quiet", "--python", entry.python, str(venv)], env=uv_env)
    sources = machine.sources(entry.indexes)
    packaged = entry.project is not None and entry.project.kind == "package"
    source_folder = entry.project.root if entry.project is not None and not packaged else None
    steps = 4 if packaged else 3
    print(f"[1/{steps}] installing {lockfile} into {venv}", file=sys.stderr, flush=True)
    sync_venv(
        venv,
        lockfile,
        sources,
        find_links=machine.find_links,
        index_strategy=entry.accelerator.index_strategy,
        runner=runner,
        env=uv_env,
    )
    also = f", and the source folder {source_folder}" if source_folder is not None else ""
    print(f"[2/{steps}] torchyard's in-image side onto the venv's path{also}", file=sys.stderr, flush=True)
    stage_inimage(venv, entry.python, source_folder)
    workdir = entry.project.root if entry.project is not None else Path.cwd()
    if entry.project is not None and packaged:
        print(
            f"[3/{steps}] building and installing {entry.project.name} (no dependencies)", file=sys.stderr, flush=True
        )
        with tempfile.TemporaryDirectory(prefix="torchyard-wheels-") as out:
            wheels = build_project_wheel(
                entry.name, project_files(entry.project.root), Path(out), sources, runner=runner, env=uv_env
            )
            install = ["uv", "pip", "install", "--quiet", "--python", str(python), "--no-deps", "--no-config"]
            # Bytecode as the lock's packages have it: the suites import the project at start-up.
            runner([*install, "--compile-bytecode", "--reinstall", *map(str, wheels)], env=uv_env)
    report_dir = reports_folder(reports, f"{entry.name}-local")
    suites = f"{', '.join(entry.suites)} suite{'s' if len(entry.suites) > 1 else ''}"
    print(f"[{steps}/{steps}] running the {suites}; reports in {report_dir}", file=sys.stderr)
    # The venv's own tools (ExecuTorch's flatc, say) on PATH, as in the image.
    run_env = {
        **env,
        **entry_environment(entry, str(report_dir)),
        "PATH": f"{(venv / 'bin').absolute()}{os.pathsep}{env.get('PATH', '')}",
        contract.INDUCTOR_CACHE: local_cache(entry, level_of(env)),
    }
    return run_suites(
        entry,
        python=str(python.absolute()),
        inimage_dir=venv.absolute() / "torchyard-inimage" / "torchyard" / "inimage",
        report_dir=report_dir,
        extra=extra,
        env=run_env,
        workdir=workdir,
        runner=runner,
    )
