"""One run of the ops suite: the operators it sweeps, the backends the entry has, the expectations it is held
to, and what it writes at the end (its reports, and the expectations file where it collects them)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import torch

from torchyard.inimage.evaluation.backends import NO_CACHE, unavailable_reason
from torchyard.inimage.evaluation.cache.artifacts import ArtifactCache
from torchyard.inimage.ops import expectations
from torchyard.inimage.ops.catalog import QUICK, Operator, op_db_operators
from torchyard.inimage.ops.options import OpsOptions
from torchyard.inimage.ops.outcomes import Outcome
from torchyard.inimage.ops.sweep import TIMEOUT_S, Plant, SweepSettings, prepare
from torchyard.inimage.ops.sweep_host import SweepHost, sweep_name
from torchyard.inimage.ops.sweep_report import write_ops_reports
from torchyard.inimage.start.tolerances import Tolerances
from torchyard.names import BACKEND_NAMES, BACKEND_SUITES, OPS_ALL, OPS_QUICK, OPT_IN_SUITES


def entry_backends(device: torch.device, suites: Sequence[str]) -> tuple[list[str], dict[str, str]]:
    """The backends the entry has (an opt-in suite's only where the entry selected it), and why each other
    cannot run here."""
    chosen = [
        name for name in BACKEND_NAMES if BACKEND_SUITES[name] not in OPT_IN_SUITES or BACKEND_SUITES[name] in suites
    ]
    reasons = {name: unavailable_reason(name, device) for name in chosen}
    return [name for name in chosen if reasons[name] is None], {name: why for name, why in reasons.items() if why}


def selection(given: str) -> tuple[str, ...] | None:
    """The operator names an option gives: the quick subset, every one (None), or the names listed."""
    if given == OPS_QUICK:
        return QUICK
    if given == OPS_ALL:
        return None
    return tuple(name.strip() for name in given.split(",") if name.strip())


class OpsSession:
    def __init__(
        self,
        options: OpsOptions,
        *,
        device: torch.device,
        dtype: torch.dtype,
        identity: Mapping[str, str],
        tolerances: Tolerances,
        backends: Sequence[str],
        report_dir: Path,
        workdir: Path,
        operators: Callable[[], list[Operator]] | None = None,
        plant: Plant | None = None,
        cache: ArtifactCache = NO_CACHE,
        timeout_s: float = TIMEOUT_S,
        host: bool | None = None,
    ) -> None:
        """`host`: sweep through a `SweepHost` (None: on a machine with a GPU, or a run that targets one);
        `operators` and `plant` must then be picklable, module-level (the host's children draw op_db's themselves)."""
        self.options, self.device, self.dtype, self.backends = options, device, dtype, list(backends)
        self.identity = {**identity, "samples": str(options.samples)}
        self.path = options.expectations or expectations.HERE / expectations.file_name(identity)
        self.expected = expectations.load(self.path)
        self.report_dir = report_dir
        # Collected where it was named, else into the reports (handed back from a container, whose torchyard is
        # read-only): torchyard's own are then copied beside the ones it ships (`nox -s ops -- --collect`).
        self.collect_to = options.expectations or report_dir / expectations.file_name(self.identity)
        self.settings = SweepSettings(device, dtype, tolerances, workdir, cache, timeout_s)
        self._make_operators = operators or (lambda: op_db_operators(dtype, device))
        self._operators: list[Operator] | None = None
        self.plant = plant
        if host is None:  # torch may have initialised CUDA below Python's notice: a GPU on the machine decides
            host = device.type != "cpu" or torch.cuda.is_available()
        self.host = SweepHost(self.backends, self.settings, options.samples, operators, plant) if host else None
        self.outcomes: list[Outcome] = []
        self.set_aside: dict[str, str] = {}
        self.differences: list[str] = []

    @property
    def operators(self) -> list[Operator]:
        if self._operators is None:
            self._operators = self._make_operators()
            prepare(self.backends)  # before any child is forked
        return self._operators

    def names(self) -> list[str]:
        """The operator names the run sweeps, each a test (an OpInfo's variants are swept under its name)."""
        chosen = selection(self.options.operators)
        if chosen is None:
            return list(dict.fromkeys(operator.base or operator.name for operator in self.operators))
        return list(chosen)

    def run(self, name: str) -> tuple[list[str], str]:
        """Sweep the operators of `name`; the ways they differ from the expectations, and, where a rule set
        every one of them aside, that rule."""
        found, rules = [], []
        if self.host is not None:
            swept = self.host.sweep(name)
        else:
            swept = sweep_name(
                self.operators, name, self.backends, self.settings, self.options.samples, samples_on=self.device,
                plant=self.plant,
            )  # fmt: skip
        for one in swept:
            if one.set_aside:
                self.set_aside[one.operator] = one.set_aside
                rules.append(one.set_aside)
            for index, rule in (one.samples_aside or {}).items():
                self.set_aside[expectations.sample_key(one.operator, index)] = rule
            self.outcomes += one.outcomes
            if not self.options.collect:  # collecting: the outcomes are the expectations
                found += expectations.differences(self.expected, one.operator, one.set_aside, one.outcomes)
        found = list(dict.fromkeys(found))
        self.differences += found
        every_one_aside = len(rules) == len(swept)
        return found, "; ".join(dict.fromkeys(rules)) if every_one_aside else ""

    def finish(self) -> list[Path]:
        """Write the reports, and the expectations file where the run collects it."""
        if self.host is not None:
            self.host.close()
        written = list(
            write_ops_reports(
                self.report_dir,
                stack=self.identity,
                backends=self.backends,
                set_aside=self.set_aside,
                outcomes=self.outcomes,
                differences=self.differences,
                shard=self.options.shard,
            )
        )
        if self.options.collect and self.options.shard != (1, 1):
            print(
                "\ntorchyard ops: a shard's outcomes are in its ops.json; `torchyard report --ops-expectations DIR` "
                "writes the stack's expectations from all its shards"
            )
        elif self.options.collect:
            self.collect_to.parent.mkdir(parents=True, exist_ok=True)
            text = expectations.render(self.identity, self.set_aside, expectations.rows(self.outcomes))
            self.collect_to.write_text(text, encoding="utf-8")
            written.append(self.collect_to)
        return written
