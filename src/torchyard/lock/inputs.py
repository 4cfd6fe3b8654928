"""The inputs that decide a lock, defined once: the digest, the header and uv's arguments all come from
`LockInputs`, and `compile_args` sees nothing else, so a field that changes resolution cannot be left out
of the freshness check.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torchyard.matrix.machine import Source, index_args
from torchyard.matrix.schema import Entry


@dataclass(frozen=True)
class LockInputs:
    """Everything that decides a lock's bytes. Index URLs are the matrix's, never a machine's mirror."""

    entry: str
    requirements: tuple[str, ...]
    indexes: tuple[tuple[str, str], ...]
    index_strategy: str
    python: str
    platform: str
    exclude_newer: str
    vendor: tuple[tuple[str, str], ...]
    uv: str
    project: tuple[str, ...] = ()  # the project's own dependencies (with its extras and groups)
    deployment_target: str | None = None  # MACOSX_DEPLOYMENT_TARGET: which macOS wheels are acceptable
    # lock-on-runner: resolved on a self-hosted runner, where no sdist may be built (its metadata runs its code)
    binary_only: bool = False
    exclude: tuple[str, ...] = ()  # packages left out of the lock (the entry's `exclude`)

    @classmethod
    def of(cls, entry: Entry, uv_version: str) -> LockInputs:
        return cls(
            entry=entry.name,
            requirements=entry.requirements,
            indexes=tuple((index.name, index.url) for index in entry.indexes),
            index_strategy=entry.accelerator.index_strategy,
            python=entry.python,
            platform=entry.accelerator.platform,
            exclude_newer=entry.exclude_newer,
            vendor=tuple((pin.name, pin.version) for pin in entry.accelerator.vendor),
            uv=uv_version,
            project=entry.project.requirements if entry.project else (),
            deployment_target=entry.accelerator.deployment_target,
            binary_only=entry.lock_on_runner,
            exclude=entry.exclude,
        )

    def record(self) -> dict[str, Any]:
        """The JSON the lockfile header records (and the digest covers): one key per field.

        `project` and `deployment-target` appear only for entries that have them, so other entries' locks
        keep their digests.
        """
        record: dict[str, Any] = {
            "entry": self.entry,
            "requirements": list(self.requirements),
            "indexes": [list(pair) for pair in self.indexes],
            "index-strategy": self.index_strategy,
            "python": self.python,
            "platform": self.platform,
            "exclude-newer": self.exclude_newer,
            "vendor": [list(pair) for pair in self.vendor],
            "uv": self.uv,
        }
        if self.project:
            record["project"] = list(self.project)
        if self.deployment_target:
            record["deployment-target"] = self.deployment_target
        if self.binary_only:
            record["binary-only"] = True
        if self.exclude:
            record["exclude"] = list(self.exclude)
        return record

    def digest(self) -> str:
        return digest_of(self.record())

    def pinned_vendor(self) -> tuple[tuple[str, str], ...]:
        return tuple(pair for pair in self.vendor if pair[1] != "*")

    def unpinned_vendor(self) -> tuple[str, ...]:
        return tuple(name for name, version in self.vendor if version == "*")

    def excluded(self) -> tuple[str, ...]:
        """What uv leaves out of the resolution: the vendor's unpinned packages (the base image has them) and
        the entry's `exclude`."""
        return (*self.unpinned_vendor(), *self.exclude)


def digest_of(data: object) -> str:
    canonical = json.dumps(data, sort_keys=True, separators=(",", ":")).encode()
    return "sha256:" + hashlib.sha256(canonical).hexdigest()


def requirements_in(inputs: LockInputs, standin_urls: Sequence[str]) -> str:
    """`requirements.in`: the entry's requirements, the project's, then each pinned vendor stand-in wheel."""
    names = [name for name, _ in inputs.pinned_vendor()]
    lines = [
        *inputs.requirements,
        *inputs.project,
        *(f"{name} @ {url}" for name, url in zip(names, standin_urls, strict=True)),
    ]
    return "".join(f"{line}\n" for line in lines)


def uv_environment(inputs: LockInputs) -> dict[str, str]:
    """Variables uv resolves under (macOS wheels are chosen by the deployment target, not an argument)."""
    return {"MACOSX_DEPLOYMENT_TARGET": inputs.deployment_target} if inputs.deployment_target else {}


def compile_args(
    inputs: LockInputs,
    sources: Sequence[Source],
    output: Path,
    *,
    excludes: Path | None,
    interpreter: str,
) -> tuple[str, ...]:
    """The `uv pip compile` argument list (run from the folder holding `requirements.in`).

    `sources` are where this machine reads the indexes named in `inputs.indexes` (a mirror or the URL).
    `interpreter` is the one uv needs at hand whatever the target (`--python-version` decides the
    resolution): torchyard's own, so a tool install locks with no Python on PATH.
    """
    args: list[str] = [
        "uv", "pip", "compile", "requirements.in",
        "--generate-hashes",
        "--no-header",
        "--no-config",
        "--python", interpreter,
        "--python-version", inputs.python,
        "--python-platform", inputs.platform,
        "--index-strategy", inputs.index_strategy,
        "--exclude-newer", inputs.exclude_newer,
        "--output-file", str(output),
    ]  # fmt: skip
    args += index_args(sources)
    if excludes is not None:
        args += ["--excludes", str(excludes)]
    for name, _ in inputs.vendor:
        args += ["--no-emit-package", name]
    if inputs.binary_only:
        # a lock-on-runner entry resolves on the GPU runner: wheels only, so no sdist's build runs there
        args += ["--only-binary", ":all:"]
    return tuple(args)
