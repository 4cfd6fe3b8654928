"""The ops suite's settings: which operators, how many samples of each, and its expectations file, as pytest
options (an entry's keys and the contract's variables for them are the host's to add). Stdlib and pytest only:
the suites' conftest registers them."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

DEFAULT_SAMPLES = 2


@dataclass(frozen=True)
class OpsOptions:
    operators: str
    samples: int
    expectations: Path | None
    collect: bool


def add_options(parser: pytest.Parser) -> None:
    group = parser.getgroup("torchyard ops")
    group.addoption(
        "--torchyard-ops", default="quick",
        help="the ops suite's operators: quick (a few dozen across families), all (the running torch's op_db), "
        "or names, comma-separated",
    )  # fmt: skip
    group.addoption(
        "--torchyard-ops-samples", type=int, default=DEFAULT_SAMPLES,
        help=f"samples of each operator the ops suite runs (default {DEFAULT_SAMPLES})",
    )  # fmt: skip
    group.addoption(
        "--torchyard-ops-expectations", default="",
        help="the ops suite's expectations file (default: the one torchyard ships for the running stack)",
    )  # fmt: skip
    group.addoption(
        "--collect-expectations", action="store_true",
        help="write the ops suite's expectations file from this run's outcomes instead of comparing with it "
        "(PYTORCH_COLLECT_EXPECT's counterpart)",
    )  # fmt: skip


def ops_options(config: pytest.Config) -> OpsOptions:
    samples = int(config.getoption("--torchyard-ops-samples"))
    if samples < 1:
        raise pytest.UsageError(f"--torchyard-ops-samples: {samples} is not a number of samples (1 or more)")
    given = str(config.getoption("--torchyard-ops-expectations"))
    return OpsOptions(
        operators=str(config.getoption("--torchyard-ops")),
        samples=samples,
        expectations=Path(given) if given else None,
        collect=bool(config.getoption("--collect-expectations")),
    )
