"""One operator's samples through the backends, in a child process forked for the purpose, so that a native
abort or segfault in a backend's runtime (ExecuTorch asserts and aborts on some samples) is that sample's
outcome on that backend, not the end of the run: the child's death is read, and a new child takes up the rest.

The children are forked from the run's process once it has imported what the backends import (`prepare`), so
none pays for ExecuTorch's compiler or dynamo again; the run's own process computes nothing on a backend."""

from __future__ import annotations

import contextlib
import faulthandler
import multiprocessing
import os
import signal
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path

import torch

from torchyard.inimage.cases import Case
from torchyard.inimage.evaluation.backends import NO_CACHE, Runner, backend_of
from torchyard.inimage.evaluation.backends.running import export_program, first_use
from torchyard.inimage.evaluation.cache.artifacts import ArtifactCache
from torchyard.inimage.evaluation.harness import REFERENCE_FAILED, Reference, Result, case_reference, evaluate
from torchyard.inimage.evaluation.trees import to_device
from torchyard.inimage.ops.catalog import Operator, Sample, sample_case
from torchyard.inimage.ops.outcomes import Outcome, first_line, metrics_of, phase_of_error
from torchyard.inimage.start.tolerances import Tolerances

MARK = "=== torchyard ops: "  # the line a child prints before each item: a crash's own lines follow the last
TIMEOUT_S = 300.0  # one sample on one backend: a stall is that item's crash

# A backend's runner replaced for one case (the self-tests plant faults so): (case name, backend) -> runner.
Plant = Callable[[str, str], Runner | None]
# In a child: the operator and its samples by number, drawn there (`ops.sweep_host`: its process cannot draw them).
Redraw = Callable[[], tuple[Operator, dict[int, Sample]]]


@dataclass(frozen=True)
class SweepSettings:
    device: torch.device
    dtype: torch.dtype
    tolerances: Tolerances
    workdir: Path  # programs and each operator's log, under a folder per operator
    cache: ArtifactCache = NO_CACHE
    timeout_s: float = TIMEOUT_S  # for one sample on one backend


def _exports_first(backend: str) -> bool:
    found = backend_of(backend)
    return found is not None and found.EXPORTS


def prepare(backends: Sequence[str]) -> None:
    """What the backends do on first use, here, before any child is forked (those absent skip)."""
    for backend in backends:
        found = backend_of(backend)
        with contextlib.suppress(ImportError):  # the backend is unavailable: the run says so where it would run
            first_use(found.FIRST_USE if found is not None else ())


def sweep_operator(
    operator: Operator,
    samples: Sequence[tuple[int, Sample | str | None]],
    backends: Sequence[str],
    settings: SweepSettings,
    plant: Plant | None = None,
    *,
    redraw: Redraw | None = None,
) -> list[Outcome]:
    """Each sample on each backend, in order; a sample a rule set aside is that outcome on every backend. With
    `redraw`, each child draws the operator and its samples again, in place of those given (`Sample | None`
    there: only the numbers and the rules that set samples aside are known where the children are forked)."""
    folder = settings.workdir / operator.name
    folder.mkdir(parents=True, exist_ok=True)
    items = [(index, sample, backend) for index, sample in samples for backend in backends]
    sweep = _Sweep(operator, items, settings, plant, folder / "output.log", redraw)
    outcomes: dict[int, Outcome] = {}
    for position, (index, sample, backend) in enumerate(items):
        if isinstance(sample, str):
            outcomes[position] = Outcome(operator.name, index, backend, "set aside", sample)
    while len(outcomes) < len(items):
        sweep.run_child([position for position in range(len(items)) if position not in outcomes], outcomes)
    return [outcomes[position] for position in range(len(items))]


@dataclass(frozen=True)
class _Sweep:
    """One operator's items (sample number, sample or the rule that set it aside, backend), and where they run."""

    operator: Operator
    items: list[tuple[int, Sample | str | None, str]]
    settings: SweepSettings
    plant: Plant | None
    log: Path  # what the children print, each item after a line of its own (`MARK`)
    redraw: Redraw | None = None

    def run_child(self, pending: list[int], outcomes: dict[int, Outcome]) -> None:
        """The pending items in one forked child, each outcome as it comes; where the child dies or stalls, the
        item it was on crashed, and the caller starts another child for the rest."""
        context = multiprocessing.get_context("fork")
        receive, send = context.Pipe(duplex=False)
        child = context.Process(target=self._child, args=(pending, send))
        child.start()
        send.close()
        try:
            with receive:
                for position in pending:
                    index, _, backend = self.items[position]
                    if receive.poll(self.settings.timeout_s):
                        with contextlib.suppress(EOFError):  # the child died: the item it was on crashed
                            outcomes[position] = receive.recv()
                            continue
                        detail = ""
                    else:
                        detail = f"did not end within {self.settings.timeout_s:.0f} s"
                        child.kill()
                    child.join()
                    detail = detail or _death(child.exitcode, self.log)
                    outcomes[position] = Outcome(self.operator.name, index, backend, "crashed", detail)
                    return
            child.join()
        finally:  # interrupted: the child goes too (multiprocessing would wait for it at the run's exit)
            if child.is_alive():
                child.kill()
                child.join()

    def _child(self, pending: list[int], send: Connection) -> None:
        """In the forked child: output to the operator's log, then each pending item, its outcome sent as known."""
        _output_to(self.log)
        _single_threaded()
        operator, drawn = self.redraw() if self.redraw is not None else (self.operator, {})
        made: dict[int, tuple[Case, Reference]] = {}
        exported: dict[int, bool] = {}
        settings = self.settings
        for position in pending:
            index, sample, backend = self.items[position]
            sample = drawn.get(index, sample)
            assert isinstance(sample, Sample)
            print(f"{MARK}{operator.name} sample {index} on {backend}", flush=True)
            if index not in made:
                case = sample_case(operator, index, sample)
                made[index] = case, case_reference(case, device=settings.device, dtype=settings.dtype)
            case, reference = made[index]
            workdir = settings.workdir / self.operator.name / f"{index}-{backend}"
            result = evaluate(
                case,
                backend,
                device=settings.device,
                dtype=settings.dtype,
                tolerances=settings.tolerances,
                workdir=workdir,
                reference=reference,
                runner=self.plant(case.name, backend) if self.plant is not None else None,
                cache=settings.cache,
            )
            sys.stdout.flush()
            sys.stderr.flush()
            if result.status == "error" and not result.reason.startswith(REFERENCE_FAILED):
                if index not in exported and _exports_first(backend):
                    exported[index] = _exports(case, settings.dtype)
                send.send(
                    _failure(self.operator.name, index, backend, result, exported=exported.get(index), workdir=workdir)
                )
            else:
                send.send(_outcome(self.operator.name, index, backend, result))
        send.close()
        os._exit(0)  # no exit handlers of the run's process (pytest's, torch's) run twice


def _single_threaded() -> None:
    """In a forked child: no pool of the parent's threads is used, for none of their threads came along.
    libgomp waits forever in the first parallel region for the parent's OpenMP threads (any suite before this
    one started them), and inductor's compile thread pool, made once per process, takes work no thread does."""
    torch.set_num_threads(1)
    # Imported here, not at the module's import: importing it makes inductor's cache folder.
    import torch._inductor.config as inductor_config

    inductor_config.compile_threads = 1  # compiles in this thread, no pool


def _output_to(log: Path) -> None:
    """In a forked child: everything it prints goes to `log`, Python's own writes too (past whatever the run's
    process put in their place: pytest's capture). A crash's detail is the last line the child printed (the
    runtime's assertion), not the Python stack that pytest's fault handler would dump into the run's output."""
    faulthandler.disable()
    target = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    for fd in (1, 2):
        os.dup2(target, fd)
    os.close(target)
    sys.stdout = open(1, "w", buffering=1, encoding="utf-8", errors="replace", closefd=False)  # noqa: SIM115
    sys.stderr = open(2, "w", buffering=1, encoding="utf-8", errors="replace", closefd=False)  # noqa: SIM115


def _death(status: int | None, log: Path) -> str:
    """How a child died, with the last line it printed for the item it was on (an assertion's, often)."""
    how = f"exit status {status}"
    if status is not None and status < 0:
        try:
            how = signal.Signals(-status).name
        except ValueError:
            how = f"signal {-status}"
    lines = log.read_text(encoding="utf-8", errors="replace").split(MARK)[-1].splitlines()[1:] if log.exists() else []
    said = [line.strip() for line in lines if line.strip()]
    return f"{how}: {said[-1]}" if said else how


def _outcome(name: str, index: int, backend: str, result: Result) -> Outcome:
    """A result that is not a backend's error: passed, a wrong value, or nothing to compare with (or to judge: a
    sample inductor compiled nothing of)."""
    if result.status == "passed":
        return Outcome(name, index, backend, "passed", metrics=metrics_of(result))
    if result.not_compiled:  # dynamo compiled nothing of the sample: inductor did not take it
        return Outcome(name, index, backend, "not supported", first_line(result.reason))
    if result.status == "failed":
        return Outcome(name, index, backend, "wrong value", first_line(result.reason), metrics_of(result))
    return Outcome(name, index, backend, "not supported", first_line(result.reason))  # skipped, or no reference


def _failure(name: str, index: int, backend: str, result: Result, *, exported: bool | None, workdir: Path) -> Outcome:
    """A backend's error, by the step that failed (`phase_of_error`): a file in `workdir` is a lowered program."""
    found = backend_of(backend)
    phase = phase_of_error(
        result.error_types,
        exported=exported,
        artifact_written=workdir.is_dir() and any(workdir.iterdir()),
        keeps_file=found is not None and found.ARTIFACT is not None,
    )
    return Outcome(name, index, backend, phase, first_line(result.reason))


def _exports(case: Case, dtype: torch.dtype) -> bool:
    """Whether the sample's module exports at all, on the CPU at the run's dtype."""
    call = to_device(case.calls()[0], torch.device("cpu"), dtype)
    try:
        export_program(case, case.module().to(dtype), call)
    except Exception:
        return False
    return True
