"""The typed plan that matrix.toml parses into. Nothing downstream of `load` sees a raw dict."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, get_args

from torchyard.contract import RunOptions
from torchyard.names import (
    NATIVE_ACCELERATORS,
    AcceleratorName,
    ChangeKind,
    Precision,
    SuiteName,
)

IndexStrategy = Literal["first-index", "unsafe-first-match", "unsafe-best-match"]
INDEX_STRATEGIES: tuple[IndexStrategy, ...] = get_args(IndexStrategy)


@dataclass(frozen=True)
class ImageRef:
    """A container image pinned by digest: `name[:tag]@sha256:<64 hex>`."""

    name: str
    digest: str

    def __str__(self) -> str:
        return f"{self.name}@{self.digest}"


@dataclass(frozen=True)
class Index:
    """A named package index; a mirror may replace its URL per machine without editing matrix.toml."""

    name: str
    url: str


@dataclass(frozen=True)
class VendorPin:
    """A package the base image ships and that must be kept: resolved against, never replaced."""

    name: str
    version: str

    def __str__(self) -> str:
        return f"{self.name}=={self.version}"


@dataclass(frozen=True)
class Tolerance:
    """Parity bounds for one dtype x backend; a field left `None` keeps the built-in default."""

    key: str  # "<dtype>.<backend>", e.g. "float32.inductor"
    max_scaled_error: float | None = None
    max_rel_l2: float | None = None
    min_cosine: float | None = None
    noise_factor: float | None = None


# A package (a pyproject.toml with [project]) is built into a wheel; a source folder (a repository of modules
# and scripts, no package) is taken as its files, importable as its own scripts import them.
ProjectKind = Literal["package", "source"]


@dataclass(frozen=True)
class Project:
    """The adopter's own code, tested in every image, its dependencies locked: a package built from source and
    installed, or a source folder whose files are on the import path (`kind`)."""

    root: Path
    name: str  # the package's name; a source folder's own name (it labels the image, nothing else)
    extras: tuple[str, ...]
    groups: tuple[str, ...]
    requirements: tuple[str, ...]  # what the lock takes for it: dependencies, extras, groups, requirements files
    kind: ProjectKind = "package"


@dataclass(frozen=True)
class AcceleratorConfig:
    name: AcceleratorName
    base_image: ImageRef | None  # None for a native accelerator (no image)
    indexes: tuple[Index, ...]
    index_strategy: IndexStrategy
    platform: str
    vendor: tuple[VendorPin, ...]
    docker_run: tuple[str, ...]
    runs_on: tuple[str, ...]
    deployment_target: str | None = None  # MACOSX_DEPLOYMENT_TARGET for resolving macOS wheels
    system_packages: tuple[str, ...] = ()  # apt packages the image needs ("a|b": the first the base has)

    @property
    def native(self) -> bool:
        return self.name in NATIVE_ACCELERATORS

    def require_base_image(self) -> ImageRef:
        if self.base_image is None:
            raise ValueError(f"accelerator {self.name!r} runs natively and has no base image")
        return self.base_image


@dataclass(frozen=True)
class Entry:
    name: str
    accelerator: AcceleratorConfig
    python: str
    requirements: tuple[str, ...]
    suites: tuple[SuiteName, ...]
    exclude_newer: str
    tolerances: tuple[Tolerance, ...]
    cases: tuple[str, ...]
    precision: Precision = "fp32"
    project: Project | None = None
    # Packages left out of the lock (uv's `--excludes`): a dependency's dependency the image does not need.
    exclude: tuple[str, ...] = ()
    tests: tuple[str, ...] = ()  # pytest node ids: paths, or `path::test` (`test_paths` has the paths)
    network: str | None = None  # why this entry's tests need the network; None keeps them off it
    timeout: str = "2h"  # the longest a run of the entry may take (capped by the machine's [limits] timeout)
    # No lock is committed: the entry's own runner, which reaches its indexes, locks it before its image.
    lock_on_runner: bool = False
    # The kinds of change against the baseline run that fail a run (`reports.compare`); the rest are reported.
    fail_on_change: tuple[ChangeKind, ...] = ()
    # What crosses into the image as it is: the project's tests' selection, compile modes, the ops suite's
    # operators and samples, localization's time bound (each declared once, in `contract.RunOptions`).
    options: RunOptions = field(default_factory=RunOptions)

    @property
    def indexes(self) -> tuple[Index, ...]:
        return self.accelerator.indexes

    @property
    def test_paths(self) -> tuple[str, ...]:
        """The files and folders the `tests` node ids name (what the image's workspace needs)."""
        return tuple(dict.fromkeys(test_path(node) for node in self.tests))


def test_path(node: str) -> str:
    """The path of a pytest node id (`tests/test_x.py::TestY::test_z` -> `tests/test_x.py`)."""
    return node.split("::", 1)[0]


@dataclass(frozen=True)
class Plan:
    source: Path
    indexes: tuple[Index, ...]
    accelerators: tuple[AcceleratorConfig, ...]
    entries: tuple[Entry, ...]

    def entry(self, name: str) -> Entry:
        for entry in self.entries:
            if entry.name == name:
                return entry
        raise KeyError(name)
