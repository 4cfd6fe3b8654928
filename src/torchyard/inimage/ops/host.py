"""The sweep on a machine with a GPU: the run's process has used the device (the probe, the self-tests), and
CUDA cannot be used again in a child forked from a process that has, so the sweep's children are forked from
a host that has not. The host is started from the harness's fork server (torch imported, nothing
initialised), builds the operators itself, draws their samples on the CPU and forks each operator's child
as the CPU sweep does; the child moves the sample to the device. Outcomes come back over a pipe.

Not yet enough for op_db's own operators on a GPU: importing torch's OpInfo database evaluates CUDA device
capabilities (torch.testing._internal.common_cuda), which initialises CUDA in the host (docs/runs.md)."""

from __future__ import annotations

import atexit
import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection

import torch

from torchyard.inimage.ops.catalog import Operator, chosen_samples, op_db_operators, select
from torchyard.inimage.ops.outcomes import Outcome
from torchyard.inimage.ops.sweep import Plant, SweepSettings, prepare, sweep_operator

CPU = torch.device("cpu")


@dataclass(frozen=True)
class Swept:
    """One operator of a name's sweep: its outcomes, the rule that set it aside ("" where none did), and the
    rules that set its samples aside (sample number -> rule)."""

    operator: str
    outcomes: list[Outcome]
    set_aside: str = ""
    samples_aside: dict[int, str] | None = None


def sweep_name(
    operators: Sequence[Operator],
    name: str,
    backends: Sequence[str],
    settings: SweepSettings,
    count: int,
    *,
    samples_on: torch.device,
    plant: Plant | None = None,
) -> list[Swept]:
    """Every operator `name` selects through the backends, its samples drawn on `samples_on`."""
    swept = []
    for operator in select(operators, [name]):
        if operator.set_aside:
            swept.append(Swept(operator.name, [], operator.set_aside))
            continue
        samples = chosen_samples(operator, samples_on, settings.dtype, count)
        outcomes = sweep_operator(operator, samples, backends, settings, plant)
        aside = {index: sample for index, sample in samples if isinstance(sample, str)}
        swept.append(Swept(operator.name, outcomes, "", aside))
    return swept


Operators = Callable[[], list[Operator]]


def _serve(  # noqa: PLR0917 (multiprocessing passes a target its arguments by position)
    requests: Connection,
    backends: list[str],
    settings: SweepSettings,
    count: int,
    make_operators: Operators | None,
    plant: Plant | None,
) -> None:
    """In the host: the operators once, then each name asked for, swept, until the pipe closes."""
    operators = make_operators() if make_operators is not None else op_db_operators(settings.dtype, CPU)
    prepare(backends)
    with requests:
        while True:
            try:
                name = requests.recv()
            except EOFError:
                return
            try:
                requests.send(sweep_name(operators, name, backends, settings, count, samples_on=CPU, plant=plant))
            except Exception as error:  # a name that selects nothing, or a sample that cannot be drawn
                requests.send(error)


class SweepHost:
    """The host process and the pipe to it; `sweep(name)` as `sweep_name` would, for the device."""

    def __init__(
        self,
        backends: Sequence[str],
        settings: SweepSettings,
        count: int,
        operators: Operators | None = None,
        plant: Plant | None = None,
    ) -> None:
        from torchyard.inimage.suites import fork_server  # the harness's server: torch imported, no device used

        context = fork_server.context()
        if context is None:
            raise RuntimeError("the ops suite on a GPU needs multiprocessing's forkserver, which this platform lacks")
        self._pipe, theirs = context.Pipe()
        self._process = context.Process(
            target=_serve,
            args=(theirs, list(backends), settings, count, operators, plant),
        )  # not a daemon: the host forks each operator's child
        fork_server.start_child(self._process)
        theirs.close()
        # Before multiprocessing's own exit handler, which waits for every child that is not a daemon: a
        # session left unfinished (a failed test) would otherwise keep its host, and the run, waiting.
        atexit.register(self.close)

    def sweep(self, name: str) -> list[Swept]:
        self._pipe.send(name)
        try:
            answer = self._pipe.recv()
        except EOFError:
            raise RuntimeError(f"the ops suite's sweep host ended while sweeping {name}") from None
        if isinstance(answer, Exception):
            raise answer
        return list(answer)

    def close(self) -> None:
        atexit.unregister(self.close)
        with contextlib.suppress(OSError):
            self._pipe.close()
        self._process.join(30)
        if self._process.is_alive():
            self._process.kill()
            self._process.join()
