"""Result replay (`torchyard test --reuse-results`): when nothing that decides a run's verdicts changed, the
last run's reports are handed back, marked as replayed, instead of running. Every run that ran its tests keeps
its reports for that, a plain run too; a run that failed to start (exit 3 and up) is never kept.

What decides the verdicts, all in the fingerprint: the environment (the image's ID, or in a venv every
installed distribution and its version); torchyard's in-image side, the entry's case modules and the project's
test files, byte for byte; the pytest arguments and every setting that decides verdicts (`contract.SETTINGS`);
the device and its driver. Any difference reruns everything. A replay keeps the original timestamps and says
that it is one, and from when, in parity.md, parity.json and on the console.
"""

from __future__ import annotations

import datetime as dt
import functools
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from torchyard import contract
from torchyard.inimage import INIMAGE

FORMAT = 2  # 2: torchyard's shared modules too, by their path in the package


def file_digests(paths: Iterable[Path]) -> list[tuple[str, str]]:
    digests = []
    for root in paths:
        candidates = sorted(root.rglob("*")) if root.is_dir() else [root]
        for path in candidates:
            if path.is_file() and "__pycache__" not in path.parts:
                digests.append((str(path), hashlib.sha256(path.read_bytes()).hexdigest()))
    return digests


@functools.cache  # the entry point's replay key and the self-tests' proof both read it; the files do not change
def shipped() -> list[tuple[str, str]]:
    """torchyard's in-image files (`contract.INIMAGE_MODULES`: the in-image side and the shared modules it
    imports), each by its path in the package and its digest: the same wherever they are (an image, `--local`'s
    copy, an installed torchyard, whose host side is no part)."""
    package = INIMAGE.parent
    digests = file_digests(package / module for module in contract.INIMAGE_MODULES)
    return [(Path(path).relative_to(package).as_posix(), digest) for path, digest in digests]


def _case_files(env: Mapping[str, str]) -> list[Path]:
    """Each case module's package folder, whole (its code, and the input files its cases load beside it); a
    top-level module's own file (its folder is site-packages, or the project's root)."""
    files = []
    for name in contract.Values(env).items(contract.CASES):
        module = name.split(":", 1)[0]
        spec = importlib.util.find_spec(module)
        if spec is not None and spec.origin:
            origin = Path(spec.origin)
            files.append(origin.parent if "." in module or origin.name == "__init__.py" else origin)
    return files


def installed_distributions() -> list[tuple[str, str]]:
    """Every installed distribution and its version, sorted."""
    return sorted(
        (distribution.metadata["Name"] or "", distribution.version)
        for distribution in importlib.metadata.distributions()
    )


def environment_identity(env: Mapping[str, str]) -> object:
    """The image's ID in a container; in a venv, every installed distribution and its version."""
    return env.get(contract.IMAGE_ID) or installed_distributions()


def fingerprint(argv: Sequence[str], env: Mapping[str, str], device: Mapping[str, Any]) -> str:
    """What decides this run's verdicts, as one sha256."""
    # The ops suite's expectations file decides verdicts however it is named (`OPTION=PATH` too).
    option = f"{contract.OPS_EXPECTATIONS_OPTION}="
    named = [arg.removeprefix(option) for arg in argv]
    # The suites' own folder is part of the in-image side, hashed once with it.
    test_paths = [
        Path(arg)
        for arg in named
        if not arg.startswith("-") and Path(arg).exists() and INIMAGE.resolve() not in Path(arg).resolve().parents
    ]
    settings = {setting.variable: env.get(setting.variable, "") for setting in contract.SETTINGS if setting.verdicts}
    document = {
        "format": FORMAT,
        "environment": environment_identity(env),
        "inimage": shipped(),
        "cases": file_digests(_case_files(env)),
        "tests": file_digests(test_paths),
        "argv": list(argv),
        "settings": settings,
        "device": dict(device),
    }
    return hashlib.sha256(json.dumps(document, sort_keys=True, default=str).encode()).hexdigest()


def replay(store: Path, key: str, report_dir: Path) -> int | None:
    """Hand back the stored reports for `key` into `report_dir`; None when there are none."""
    entry = store / key
    try:
        record = json.loads((entry / "record.json").read_text())
    except (OSError, ValueError):
        return None
    when = str(record["started"])
    report_dir.mkdir(parents=True, exist_ok=True)
    for name in contract.REPORT_FILES:
        if (entry / name).is_file():
            shutil.copyfile(entry / name, report_dir / name)
    note = {"replayed": True, "original-run": when, "fingerprint": key}
    for name in (contract.PARITY_JSON, contract.OPS_JSON):
        if (report_dir / name).is_file():
            data = json.loads((report_dir / name).read_text())
            if isinstance(data, dict):
                (report_dir / name).write_text(json.dumps({**data, "replay": note}, indent=2, sort_keys=True))
    line = f"**Replayed**: nothing ran; these are the verdicts of the run of {when} (same fingerprint {key[:16]})."
    for name in (contract.PARITY_MARKDOWN, contract.OPS_MARKDOWN):
        if (report_dir / name).is_file():
            (report_dir / name).write_text(f"{line}\n\n{(report_dir / name).read_text()}")
    print(f"torchyard: replayed the verdicts of the run of {when}: nothing that decides them changed")
    return int(record["status"])


def save(store: Path, key: str, report_dir: Path, status: int, started: dt.datetime) -> None:
    """Keep this run's reports under `key` (a whole folder, renamed into place)."""
    if status >= contract.PROBE_FAILED or status < 0:
        return
    try:
        store.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(dir=store, prefix=f".{key[:16]}-"))
    except OSError as error:
        _not_kept(error)
        return
    try:
        for name in contract.REPORT_FILES:
            if (report_dir / name).is_file():
                shutil.copyfile(report_dir / name, staging / name)
        (staging / "record.json").write_text(json.dumps({"status": status, "started": started.isoformat()}))
        target = store / key
        if target.exists():
            shutil.rmtree(target, ignore_errors=True)
        staging.rename(target)
    except OSError as error:
        _not_kept(error)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _not_kept(error: OSError) -> None:
    print(f"torchyard: the run's verdicts were not kept for replay: {error}", file=sys.stderr)


def store_for(env: Mapping[str, str], report_dir: Path) -> Path:
    return contract.cache_root(env, report_dir) / "results"


def enabled(env: Mapping[str, str] = os.environ) -> bool:
    return env.get(contract.REUSE_RESULTS) == "1"
