"""The one gate between a pull request's matrix.toml and where and how its entries run.

In an untrusted run the matrix.toml on disk is the pull request's. It may pick among the trusted entries'
accelerators and tighten their limits; every policy value (runner labels, bases, indexes, vendor and system
packages, the docker-run flags a machine allows) must be the trusted matrix.toml's, the default branch's that
TORCHYARD_TRUSTED_MATRIX names. Every command that acts on entries (matrix, build, test) gets its entries
through `gate_entries`, so no later step sees a value the pull request chose where the trusted configuration
decides.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from torchyard.errors import ConfigError
from torchyard.matrix.load import parse_plan
from torchyard.matrix.schema import AcceleratorConfig, Entry, Plan
from torchyard.matrix.values import SAFE_DOCKER_RUN, flag_values
from torchyard.trust import Trust

TRUSTED_MATRIX_ENV = "TORCHYARD_TRUSTED_MATRIX"
# Where and how an accelerator's entries run and are built: the trusted configuration's alone.
POLICY_FIELDS = (
    "runs_on", "base_image", "indexes", "index_strategy", "platform", "vendor", "system_packages",
    "deployment_target",
)  # fmt: skip


@dataclass(frozen=True)
class TrustedConfig:
    """The trusted matrix.toml as parsed for an untrusted run (None where the run names none)."""

    plan: Plan | None
    origin: str  # for messages: where the trusted matrix came from

    def accelerator(self, entry: Entry) -> AcceleratorConfig | None:
        """What the trusted configuration says for `entry`: its trusted entry's settings (an entry may name
        its own base), else its accelerator's table."""
        if self.plan is None:
            return None
        same = next((trusted for trusted in self.plan.entries if trusted.name == entry.name), None)
        if same is not None and same.accelerator.name == entry.accelerator.name:
            return same.accelerator
        return next((config for config in self.plan.accelerators if config.name == entry.accelerator.name), None)


NO_TRUSTED_CONFIG = TrustedConfig(None, "a trusted run")


def load_trusted(matrix: Path, allowed_docker_run: Collection[str], env: Mapping[str, str]) -> TrustedConfig:
    """The trusted matrix.toml named by TORCHYARD_TRUSTED_MATRIX, read with this machine's allow-list. Its
    relative paths (an entry's `project = "."`) resolve beside the checkout's matrix.toml, where the project
    is: the workflow copies the trusted file elsewhere."""
    path = env.get(TRUSTED_MATRIX_ENV)
    if not path:
        return TrustedConfig(None, f"no {TRUSTED_MATRIX_ENV}")
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigError(f"{TRUSTED_MATRIX_ENV}={path}: cannot read the trusted matrix.toml ({error})") from None
    source = Path(os.path.abspath(matrix))  # noqa: PTH100 (where the checkout's file is named, not a link's target)
    return TrustedConfig(parse_plan(text, source, allowed_docker_run=allowed_docker_run), path)


def _pairs(flags: Sequence[str]) -> set[tuple[str, str]]:
    return {(flag, value) for _, flag, value in flag_values(tuple(flags))}


def _untrusted_flags(entry: Entry, trusted: AcceleratorConfig | None) -> list[str]:
    """The entry's docker-run flags that an untrusted run may not take: any flag outside the ones that
    cannot widen the container (SAFE_DOCKER_RUN: limits, which the seal caps at the machine's, and plain
    variables), unless the trusted configuration sets that very flag to that very value."""
    granted = _pairs(trusted.docker_run) if trusted is not None else set()
    return [
        entry.accelerator.docker_run[position]
        for position, flag, value in flag_values(entry.accelerator.docker_run)
        if flag not in SAFE_DOCKER_RUN and (flag, value) not in granted
    ]


def gate_entry(entry: Entry, trust: Trust, trusted: TrustedConfig) -> Entry:
    """`entry` as the run may use it: unchanged when trusted; in an untrusted run, refused in one line when
    the pull request changed a policy value of its accelerator or added a flag the trusted configuration does
    not set."""
    if trust == "trusted":
        return entry
    name = entry.accelerator.name
    where = f'matrix.toml: entry "{entry.name}" > accelerators > {name}'
    if trusted.plan is None:  # fail closed: without it the pull request's own policy values would pass
        raise ConfigError(
            f"{where}: an untrusted run keeps the trusted matrix.toml's runners, bases, indexes and flags: set "
            f"{TRUSTED_MATRIX_ENV} to the default branch's (the workflows check it out)"
        )
    config = trusted.accelerator(entry)
    if config is None:
        raise ConfigError(
            f"{where}: an untrusted run uses only accelerators the trusted matrix.toml ({trusted.origin}) has"
        )
    changed = [
        field.replace("_", "-")
        for field in POLICY_FIELDS
        if getattr(entry.accelerator, field) != getattr(config, field)
    ]
    if changed:
        raise ConfigError(
            f"{where}: this untrusted run changes {', '.join(changed)} from the trusted matrix.toml "
            f"({trusted.origin}); where and how entries run changes only once the change is trusted"
        )
    refused = _untrusted_flags(entry, config)
    if refused:
        raise ConfigError(
            f"{where} > docker-run: an untrusted run takes {refused[0]!r} only as the trusted matrix.toml "
            f"({trusted.origin}) sets it; a pull request may add limits and variables, never a flag this "
            "machine allows"
        )
    # What fails a run on a change: the trusted entry's kinds, and any the pull request adds (never fewer).
    same = next((found for found in trusted.plan.entries if found.name == entry.name), None)
    if same is not None:
        entry = replace(entry, fail_on_change=tuple(dict.fromkeys((*same.fail_on_change, *entry.fail_on_change))))
    return entry


def gate_entries(entries: Sequence[Entry], trust: Trust, trusted: TrustedConfig) -> tuple[Entry, ...]:
    return tuple(gate_entry(entry, trust, trusted) for entry in entries)
