"""The sweep on a machine with a GPU. CUDA cannot be used in a child forked from a process that initialised
it, and both the run's process (the probe, the self-tests) and any process that imports torch's OpInfo
database (`torch.testing._internal.common_cuda` reads the device's capabilities) have. So the sweep's
children are forked from a host that does neither: started from the harness's fork server (torch imported,
nothing initialised), it imports what the backends import, and for each operator name forks one child that
says which operators and samples the name has, then a child per operator, as the CPU sweep does, each of
which draws its operator and samples again (on the CPU, the same every time: `chosen_samples` seeds them)
and moves them to the device. Outcomes come back over a pipe. Each child pays for importing op_db."""

from __future__ import annotations

import atexit
import contextlib
import functools
import multiprocessing
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

import torch

from torchyard.inimage.ops.catalog import Operator, Sample, chosen_samples, op_db_operators, select
from torchyard.inimage.ops.outcomes import Outcome
from torchyard.inimage.ops.sweep import Plant, SweepSettings, prepare, sweep_operator
from torchyard.inimage.start.probe import CPU

Operators = Callable[[], list[Operator]]


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


# What a name's first child says of it: each operator's name, the rule that set it aside, and its samples'
# numbers with the rule that set each aside (None: it runs).
Described = list[tuple[str, str, list[tuple[int, str | None]]]]


def _operators(make_operators: Operators | None, dtype: torch.dtype) -> list[Operator]:
    return make_operators() if make_operators is not None else op_db_operators(dtype, CPU)


def _describe(name: str, make_operators: Operators | None, dtype: torch.dtype, count: int, send: Connection) -> None:
    """In a child of the host: the operators `name` selects and their samples, or why there are none."""
    try:
        described: Described = []
        for operator in select(_operators(make_operators, dtype), [name]):
            samples = [] if operator.set_aside else chosen_samples(operator, CPU, dtype, count)
            numbered = [(index, sample if isinstance(sample, str) else None) for index, sample in samples]
            described.append((operator.name, operator.set_aside, numbered))
        send.send(described)
    except Exception as error:  # a name that selects nothing, a sample that cannot be drawn
        send.send(RuntimeError(f"{type(error).__name__}: {error}"))


def _redraw(
    operator: str, name: str, make_operators: Operators | None, dtype: torch.dtype, count: int
) -> tuple[Operator, dict[int, Sample]]:
    """In an operator's child: the operator and its samples, drawn as `_describe` drew them."""
    found = next(one for one in select(_operators(make_operators, dtype), [name]) if one.name == operator)
    samples = chosen_samples(found, CPU, dtype, count)
    return found, {index: sample for index, sample in samples if isinstance(sample, Sample)}


def _unused(*_: Any) -> Any:
    raise AssertionError("the host's operators are drawn in its children")


def _swept(  # noqa: PLR0917 (the host's one call, its arguments as `_serve` has them)
    name: str,
    backends: list[str],
    settings: SweepSettings,
    count: int,
    make_operators: Operators | None,
    plant: Plant | None,
) -> list[Swept]:
    """In the host: `name` described by one child, then each operator swept by children that draw it again."""
    fork = multiprocessing.get_context("fork")
    receive, send = fork.Pipe(duplex=False)
    child = fork.Process(target=_describe, args=(name, make_operators, settings.dtype, count, send))
    child.start()
    send.close()
    with receive:
        try:
            described: Described | Exception = receive.recv()
        except EOFError:
            described = RuntimeError(f"drawing the samples of {name} ended the process that drew them")
    child.join()
    if isinstance(described, Exception):
        raise described
    swept = []
    for operator, set_aside, numbered in described:
        if set_aside:
            swept.append(Swept(operator, [], set_aside))
            continue
        redraw = functools.partial(_redraw, operator, name, make_operators, settings.dtype, count)
        stub = Operator(operator, _unused, _unused)
        outcomes = sweep_operator(
            stub, [(index, rule) for index, rule in numbered], backends, settings, plant, redraw=redraw
        )
        aside = {index: rule for index, rule in numbered if rule is not None}
        swept.append(Swept(operator, outcomes, "", aside))
    return swept


def _serve(  # noqa: PLR0917 (multiprocessing passes a target its arguments by position)
    requests: Connection,
    backends: list[str],
    settings: SweepSettings,
    count: int,
    make_operators: Operators | None,
    plant: Plant | None,
) -> None:
    """In the host: what the backends import, once, then each name asked for, swept, until the pipe closes."""
    prepare(backends)
    with requests:
        while True:
            try:
                name = requests.recv()
            except EOFError:
                return
            try:
                requests.send(_swept(name, backends, settings, count, make_operators, plant))
            except Exception as error:
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
        from torchyard.inimage.start import fork_server  # the harness's server: torch imported, no device used

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
