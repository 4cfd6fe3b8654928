"""The ops suite's settings: which operators (the entry's `ops-operators`), how many samples of each
(`ops-samples`), which shard of them, and its expectations file. Stdlib and pytest only: torchyard's plugin
registers these options beside its own."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from torchyard import contract
from torchyard.inimage.start.settings import RUN_SETTINGS


@dataclass(frozen=True)
class OpsOptions:
    operators: str
    samples: int
    expectations: Path | None
    collect: bool
    shard: tuple[int, int] = (1, 1)  # (K, N): the K-th of N slices of the operators

    def sharded(self, names: Sequence[str]) -> tuple[str, ...]:
        """This shard's slice of `names`: every N-th from the K-th, so N shards together run each name once."""
        index, count = self.shard
        return tuple(names[index - 1 :: count])


def add_options(parser: pytest.Parser) -> None:
    """The ops suite's own options; which operators and how many samples are the entry's settings
    (`contract.SETTINGS`: `ops-operators`, `ops-samples`), added with the others."""
    group = parser.getgroup("torchyard ops")
    group.addoption("--torchyard-ops", default=None, help="renamed --torchyard-ops-operators")
    group.addoption(
        contract.OPS_EXPECTATIONS_OPTION, default="",
        help="the ops suite's expectations file (default: the one torchyard ships for the running stack)",
    )  # fmt: skip
    group.addoption(
        "--collect-expectations", action="store_true",
        help="write the ops suite's expectations file from this run's outcomes instead of comparing with it "
        "(PYTORCH_COLLECT_EXPECT's counterpart)",
    )  # fmt: skip
    group.addoption(
        contract.OPS_SHARD_OPTION, default="1/1",
        help="K/N: run the K-th of N slices of the ops suite's operators (a workflow spreads a sweep so)",
    )  # fmt: skip


def ops_options(config: pytest.Config) -> OpsOptions:
    if config.getoption("--torchyard-ops") is not None:
        raise pytest.UsageError("--torchyard-ops is now --torchyard-ops-operators (the entry's `ops-operators`)")
    options = config.stash[RUN_SETTINGS].options
    if options.ops_samples < 1:
        raise pytest.UsageError(
            f"--torchyard-ops-samples: {options.ops_samples} is not a number of samples (1 or more)"
        )
    try:
        shard = contract.parse_shard(str(config.getoption(contract.OPS_SHARD_OPTION)))
    except ValueError as error:
        raise pytest.UsageError(f"--torchyard-ops-shard: {error}") from None
    collect = bool(config.getoption("--collect-expectations"))
    given = str(config.getoption(contract.OPS_EXPECTATIONS_OPTION))
    return OpsOptions(
        operators=options.ops_operators,
        samples=options.ops_samples,
        expectations=Path(given) if given else None,
        collect=collect,
        shard=shard,
    )
