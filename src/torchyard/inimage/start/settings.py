"""The run's settings: a pytest option for each setting that has one (`contract.SETTINGS`), its default the
setting's variable, read once at configuration into a frozen `RunSettings` that is passed down."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

import pytest

from torchyard import contract
from torchyard.contract import RunOptions
from torchyard.inimage.start.precision import pin_precision
from torchyard.inimage.start.tolerances import Tolerances, load_tolerances
from torchyard.names import (
    BACKEND_NAMES,
    BACKEND_SUITES,
    OPT_IN_SUITES,
    TRAIN_BACKENDS,
    Precision,
)


class SettingsError(ValueError):
    """A setting's value does not parse; the message names the setting."""


@dataclass(frozen=True)
class RunSettings:
    accelerator: str
    precision: Precision
    report_dir: Path
    tolerances: Tolerances
    case_modules: tuple[str, ...]
    suites: tuple[str, ...]
    vendor_record: Path | None
    precision_settings: dict[str, object]
    options: RunOptions = field(default_factory=RunOptions)  # the entry's, as matrix.toml gave them
    rerun: bool = False  # evaluate every result: the result cache neither replays nor keeps
    cache: Path | None = None  # the entry's cache (a container's volume, `.torchyard/cache/<entry>`), where it has one
    artifacts: bool = True  # whether lowered programs and results are kept in it (`contract.ARTIFACT_CACHE`)
    trust: str = "trusted"  # what the run's caches are scoped by, as the host decided
    unlocked: Path | None = None  # a run outside a locked image: its entry's lockfile (`Path()`: it has none)

    @property
    def cache_root(self) -> Path:
        """The entry's cache, else a folder in the reports (`contract.cache_root`)."""
        return self.cache or self.report_dir / ".inductor-cache"

    @classmethod
    def read(cls, values: contract.Values) -> RunSettings:
        """From the settings' values as their variables carry them (`SettingsError` where one does not parse)."""
        try:
            tolerances = load_tolerances(values.text(contract.TOLERANCES))
        except (ValueError, json.JSONDecodeError) as error:
            raise SettingsError(f"tolerances: {error}") from None
        record = values.text(contract.VENDOR_RECORD)
        try:
            options = values.options()
        except ValueError as error:
            raise SettingsError(str(error)) from None
        return cls(
            accelerator=values.text(contract.ACCELERATOR),
            precision=cast(Precision, values.text(contract.PRECISION)),
            report_dir=Path(values.text(contract.REPORT_DIR)),
            tolerances=tolerances,
            case_modules=values.items(contract.CASES),
            suites=values.items(contract.SUITES),
            vendor_record=Path(record) if record else None,
            precision_settings=pin_precision(),
            options=options,
            rerun=values.enabled(contract.RERUN),
            cache=Path(cache) if (cache := values.text(contract.INDUCTOR_CACHE)) else None,
            artifacts=values.text(contract.ARTIFACT_CACHE) != "off",
            trust=values.text(contract.TRUST),
            unlocked=Path(unlocked) if (unlocked := values.encoded.get(contract.UNLOCKED)) is not None else None,
        )

    @property
    def compile_backends(self) -> tuple[str, ...]:
        """The compile suite's backends (`names.BACKEND_FACTS`), each once per torch.compile mode the entry asks
        for, each mode but the default after a colon."""
        modes = self.options.compile_modes or ("default",)
        compiled = [name for name in BACKEND_NAMES if BACKEND_SUITES[name] == "compile"]
        return tuple(name if mode == "default" else f"{name}:{mode}" for name in compiled for mode in modes)

    @property
    def train_backends(self) -> tuple[str, ...]:
        """Eager and compiled, per optimizer; each compile mode other than the default after a colon."""
        modes = [backend.partition(":")[2] for backend in self.compile_backends]
        return tuple(
            backend if "inductor" not in backend or not mode else f"{backend}:{mode}"
            for backend in TRAIN_BACKENDS
            for mode in (modes if "inductor" in backend else [""])
        )

    @property
    def parity_backends(self) -> tuple[str, ...]:
        """Every backend (each compile mode one), but an opt-in suite's only where the run selected that suite."""
        return tuple(
            backend
            for name in BACKEND_NAMES
            if BACKEND_SUITES[name] not in OPT_IN_SUITES or BACKEND_SUITES[name] in self.suites
            for backend in (self.compile_backends if name == "inductor" else (name,))
        )


RUN_SETTINGS = pytest.StashKey[RunSettings]()


def add_options(parser: pytest.Parser) -> None:
    """An option for each setting that has one, its default the setting's variable; a boolean's is a flag
    that turns it from its default, as the variable may have already."""
    group = parser.getgroup("torchyard")
    environment = contract.Values(os.environ)
    for setting in contract.SETTINGS:
        if setting.option is None:
            continue
        if setting.encoding == "bool":
            turned = environment.enabled(setting.variable) != _on_by_default(setting)
            group.addoption(setting.option, action="store_true", default=turned, help=setting.means)
        else:
            default, choices = environment.text(setting.variable), list(setting.choices) or None
            group.addoption(setting.option, default=default, choices=choices, help=setting.means)


def _on_by_default(setting: contract.Setting) -> bool:
    """A boolean setting's state where nothing sets it."""
    return contract.Values({}).enabled(setting.variable)


def option_values(config: pytest.Config) -> contract.Values:
    """The settings' values from their options (each defaults to its variable), and those without an option from
    their variables, as their variables carry them: the run's environment, read once."""
    encoded: dict[str, str] = {}
    for setting in contract.SETTINGS:
        if setting.option is None and setting.variable in os.environ:
            encoded[setting.variable] = os.environ[setting.variable]
        elif setting.option is not None:
            value = config.getoption(setting.option)
            encoded[setting.variable] = (
                setting.encode(bool(value) != _on_by_default(setting)) if setting.encoding == "bool" else str(value)
            )
    return contract.Values(encoded)


def run_settings(config: pytest.Config) -> RunSettings:
    """The run's settings from its options, once, at configuration; a value that does not parse is a usage error."""
    try:
        return RunSettings.read(option_values(config))
    except SettingsError as error:
        raise pytest.UsageError(f"torchyard {error}") from None
