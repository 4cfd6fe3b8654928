"""The evaluations the suites share (`Evaluations`), and the entry's artifact cache they lower into."""

from __future__ import annotations

import dataclasses
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from torchyard import contract
from torchyard.inimage.cases import Case
from torchyard.inimage.evaluation.backends import Chosen, choose
from torchyard.inimage.evaluation.cache.artifacts import ArtifactCache
from torchyard.inimage.evaluation.cache.record import Record, recording
from torchyard.inimage.evaluation.cache.results import ResultCache
from torchyard.inimage.evaluation.errors import TORCHYARD, describe_error, torchyards_fault
from torchyard.inimage.evaluation.factory import factory_differs
from torchyard.inimage.evaluation.harness import REFERENCE_FAILED, Reference, Result, Status, case_reference, evaluate
from torchyard.inimage.evaluation.localize import Localization, localize_failure, localize_train
from torchyard.inimage.evaluation.training import (
    TrainBackend,
    TrainReference,
    make_train_reference,
    train_runner,
    untrainable,
)
from torchyard.inimage.start.precision import DTYPES
from torchyard.inimage.start.probe import torch_device
from torchyard.inimage.start.settings import RunSettings
from torchyard.inimage.start.tolerances import Bounds
from torchyard.names import AUDIT_EVERY


def artifact_cache(settings: RunSettings) -> ArtifactCache:
    """Lowered programs by content, shared by every worker and run of the entry (`off` turns it off)."""
    return ArtifactCache(settings.cache_root / "artifacts" if settings.artifacts else None)


def result_cache(settings: RunSettings) -> ResultCache:
    """Passing results by the key of what decides them, beside the artifacts (off with the artifact cache)."""
    return ResultCache(
        settings.cache_root / "verdicts" if settings.artifacts else None,
        rerun=settings.rerun,
        audit_every=AUDIT_EVERY if settings.trust == "trusted" else 0,  # an untrusted run's scope is thrown away
    )


class Evaluations:
    """Each case x backend runs once per process (the compile and parity suites read the same result),
    and each case's reference is made once."""

    def __init__(self, settings: RunSettings, workdir: Path, kept: ResultCache | None = None) -> None:
        """`kept`: the entry's result cache (`result_cache`), which only the run's own suites are given: a
        self-test that plants a fault outside what the key sees must neither replay nor keep a verdict."""
        self.settings = settings
        self.device = torch_device(settings.accelerator)
        self.dtype = DTYPES[settings.precision]
        self.workdir = workdir
        self._results: dict[tuple[str, str], Result] = {}
        self.cache = artifact_cache(settings)
        self.kept = kept or ResultCache(None)
        self._references: dict[str, Reference] = {}
        self._train_references: dict[tuple[str, str], TrainReference] = {}
        self._chosen: dict[str, Chosen] = {}
        self._untrainable: dict[str, str | None] = {}  # per case: its module built and run once, not per backend
        # What each case's reference read and ran (`cache.record`): kept with every verdict of the case
        self._records: dict[str, Record] = {}
        self._train_records: dict[tuple[str, str], Record] = {}

    def _as_the_entry_compiles(self, case: Case) -> Case:
        """The case held to one graph where the entry says `fullgraph` (its key says so too)."""
        return dataclasses.replace(case, fullgraph=True) if self.settings.options.fullgraph else case

    def result(self, case: Case, backend: str) -> Result:
        case = self._as_the_entry_compiles(case)
        key = (case.name, backend)
        if key not in self._results:
            decides = self._decides(case, [backend])
            # Resolved once per process, and the case's bounds on it once: the evaluation looks neither up again.
            if backend not in self._chosen:
                self._chosen[backend] = choose(backend, self.device)
            chosen = self._chosen[backend]
            kept = self.kept.key(case, backend, self.device, kind="inference", **decides)
            replayed = self.kept.lookup(kept)
            if replayed is not None:
                self._results[key] = replayed
                return replayed
            if case.name not in self._references:
                with recording() as recorded:  # what the case's own code reads and runs, kept with its verdicts
                    self._references[case.name] = case_reference(case, device=self.device, dtype=self.dtype)
                self._records[case.name] = recorded[0]
            reference = self._references[case.name]
            bounds = Bounds(**decides["bounds"][backend])

            def evaluated(workdir: Path) -> Result:
                return evaluate(
                    case, chosen, device=self.device, dtype=self.dtype, tolerances=self.settings.tolerances,
                    workdir=workdir, reference=reference, cache=self.cache, bounds=bounds,
                )  # fmt: skip

            # what the backend's lowering and run read (a branch only export or a compiler takes), kept with it
            with recording(trace=False) as lowered:
                first = evaluated(self.workdir / case.name)
                self._results[key] = again_on_failure(case, first, evaluated, self.workdir)
            result = self._results[key]
            if self.settings.options.localize_seconds:  # 0: the entry turned localization off
                where = localize_failure(
                    case, result, chosen, bounds, dtype=self.dtype, tolerances=self.settings.tolerances,
                    workdir=self.workdir / case.name / "localize", device=self.device,
                    time_bound=self.settings.options.localize_seconds,
                )  # fmt: skip
                result.diverges = where.as_dict() if where is not None else result.diverges
            self.kept.keep(kept, self._results[key], self._records[case.name].joined(lowered[0]))
        return self._results[key]

    def _decides(self, case: Case, backends: Sequence[str]) -> dict[str, Any]:
        """What of the run's settings decides a result on `backends` (the result cache's key has the case's own):
        the bounds those backends are held to, the case's overrides applied, not the whole table's, so a change
        to a train bound moves no inference result; and every entry option that decides a result, by its
        declaration (`contract.result_deciding`)."""
        dtype_name = str(self.dtype).removeprefix("torch.")
        return {
            "dtype": str(self.dtype),
            "bounds": {
                name: vars(self.settings.tolerances.bounds(dtype_name, name, case.tolerances)) for name in backends
            },
            "precision": self.settings.precision_settings,
            "options": contract.result_deciding(self.settings.options),
        }

    def train_result(self, case: Case, backend: str) -> Result:
        """One optimizer step on `backend` against the float64 step (`evaluation.training`)."""
        case = self._as_the_entry_compiles(case)
        key = (case.name, backend)
        if key not in self._results:
            dtype_name = str(self.dtype).removeprefix("torch.")
            # every train backend's bounds: the loosest of the optimizer's decides what the step holds still
            decides = self._decides(case, self.settings.train_backends)
            kept = self.kept.key(case, backend, self.device, kind="train", train=case.train, **decides)
            replayed = self.kept.lookup(kept)
            if replayed is not None:
                self._results[key] = replayed
                return replayed
            if case.name not in self._untrainable:
                try:
                    differs = factory_differs(case)  # the step's reference and each backend build one each
                    self._untrainable[case.name] = f"{REFERENCE_FAILED}{differs}" if differs else untrainable(case)
                except Exception as error:  # its forward fails: no reference, as for the inference suites
                    self._untrainable[case.name] = f"{REFERENCE_FAILED}eager on cpu fails: {describe_error(error)}"
            why = self._untrainable[case.name]
            if why is not None:
                status: Status = "error" if why.startswith(REFERENCE_FAILED) else "skipped"
                self._results[key] = Result(case.name, backend, dtype_name, status, why)
                return self._results[key]
            optimizer = TrainBackend.parse(backend).optimizer
            if (case.name, optimizer) not in self._train_references:
                # The loosest gradient bound among this optimizer's backends decides which elements its
                # step holds still (`training.held_below`): one mask for the reference and each backend.
                gradient_bound = max(
                    self.settings.tolerances.bounds(dtype_name, name, case.tolerances).max_scaled_error
                    for name in self.settings.train_backends
                    if TrainBackend.parse(name).optimizer == optimizer
                )
                try:
                    with recording() as recorded:
                        self._train_references[case.name, optimizer] = make_train_reference(
                            case, optimizer, device=self.device, dtype=self.dtype, gradient_bound=gradient_bound
                        )
                except Exception as error:  # the model's float64 step, or torchyard's code around it: said apart
                    self._results[key] = Result(case.name, backend, dtype_name, "error", _step_failed(error))
                    return self._results[key]
                self._train_records[case.name, optimizer] = recorded[0]
            made = self._train_references[case.name, optimizer]

            def stepped(workdir: Path) -> Result:
                return evaluate(
                    case, backend, device=self.device, dtype=self.dtype, weights=torch.float32,
                    tolerances=self.settings.tolerances, workdir=workdir, reference=made.reference,
                    runner=train_runner(backend, self.dtype, made.frozen),
                )  # fmt: skip

            with recording(trace=False) as lowered:
                self._results[key] = again_on_failure(case, stepped(self.workdir / case.name), stepped, self.workdir)
            self._localize_train(case, self._results[key], made)
            self.kept.keep(kept, self._results[key], self._train_records[case.name, optimizer].joined(lowered[0]))
        return self._results[key]

    def _eager_misses_alike(self, case: Case, result: Result) -> str:
        """Why a compiled step that fails is float32's to answer for, not the compiler's: the eager step of the
        same optimizer (where the run has it) misses the float64 step too, by as much within a factor of
        `EAGER_ALIKE`. "" otherwise."""
        eager = f"train-eager-{TrainBackend.parse(result.backend).optimizer}"
        if eager not in self.settings.train_backends:
            return ""
        own = self.train_result(case, eager)
        if own.status != "failed":
            return ""
        worst, eagers = _worst_rel_l2(result), _worst_rel_l2(own)
        if worst > EAGER_ALIKE * eagers:
            return ""
        return (
            f"no compiler step to look for: the eager float32 step ({eager}) misses the float64 step too (worst "
            f"relative L2 {eagers:.3g}, this step's {worst:.3g}): the bounds are tighter than float32 holds for this "
            "model, which no compiler step explains (own-cases.md, Training, says how to set a case's train bounds)"
        )

    def _localize_train(self, case: Case, result: Result, made: TrainReference) -> None:
        """Where a failing compiled training step diverges (the bisector's step), within the entry's time bound.
        An eager step has no compiler to blame."""
        if result.status != "failed" or result.not_compiled or not TrainBackend.parse(result.backend).compiled:
            return
        if not self.settings.options.localize_seconds:
            return
        conditioned = self._eager_misses_alike(case, result)
        if conditioned:  # no compiler step to find: eager's own float32 step misses as much
            result.diverges = Localization(result.backend, None, 0, 0.0, conditioned).as_dict()
            return
        runner = train_runner(result.backend, self.dtype, made.frozen, timed=False)

        def correct() -> bool:
            again = evaluate(
                case, result.backend, device=self.device, dtype=self.dtype, weights=torch.float32,
                tolerances=self.settings.tolerances, workdir=self.workdir / case.name / "localize",
                reference=made.reference, runner=runner,
            )  # fmt: skip
            return again.status == "passed"

        where = localize_train(result.backend, correct, time_bound=self.settings.options.localize_seconds)
        if LAYOUT_OPTIMIZATION in where.pass_name:
            note = self.channels_last_note(case, result, made)
            where = dataclasses.replace(where, note=note) if note else where
        result.diverges = where.as_dict()

    def channels_last_note(self, case: Case, result: Result, made: TrainReference) -> str:
        """Why a compiled step the bisector blames on inductor's layout optimization (its convolutions' layout,
        channels-last, in training) misses: where the eager step in channels-last misses the float64 step too, by
        as much within `EAGER_ALIKE`, it is the stack's channels-last precision, not a wrong compile. "" else."""
        eager = f"train-eager-{TrainBackend.parse(result.backend).optimizer}"
        runner = train_runner(eager, self.dtype, made.frozen, timed=False, channels_last=True)
        dtype_name = str(self.dtype).removeprefix("torch.")
        alike = evaluate(
            case, eager, device=self.device, dtype=self.dtype, weights=torch.float32,
            tolerances=self.settings.tolerances, workdir=self.workdir / case.name / "channels-last",
            reference=made.reference, runner=runner,
            bounds=self.settings.tolerances.bounds(dtype_name, result.backend, case.tolerances),
        )  # fmt: skip
        worst, eagers = _worst_rel_l2(result), _worst_rel_l2(alike)
        if alike.status != "failed" or worst > EAGER_ALIKE * eagers:
            return ""
        return (
            f"the stack's precision, not a wrong compile: inductor's layout optimization (the bisector's step) takes "
            f"the step in channels-last, and the eager step in channels-last misses the float64 step too (worst "
            f"relative L2 {eagers:.3g}, this step's {worst:.3g}): the stack's channels-last kernels (BatchNorm's "
            "backward on the CPU) sum in float32 where the contiguous ones sum in float64. "
            "`torch._inductor.config.layout_optimization = False` keeps the step contiguous; own-cases.md, Training, "
            "says how to loosen a case's bounds"
        )


EAGER_ALIKE = 10.0  # a compiled step within this factor of eager's own miss is float32's, not the compiler's
LAYOUT_OPTIMIZATION = "layout_optimization"  # the bisector's name for inductor's choice of channels-last


def again_on_failure(case: Case, first: Result, evaluated: Callable[[Path], Result], workdir: Path) -> Result:
    """A result whose values missed (no known failure explains it) is evaluated once more: where the second
    evaluation passes, the result is flaky, and says so with both outcomes. It still fails: a program that
    computes a wrong value only some of the time is wrong."""
    if first.status != "failed" or first.not_compiled or case.known_failure(first.backend) is not None:
        return first
    second = evaluated(workdir / case.name / "again")
    if second.status == "passed":
        first.flaky = f"flaky: it failed ({first.reason}), then passed when evaluated again in the same run"
        first.reason = f"{first.reason} [flaky: it passed when evaluated again]"
    return first


def _worst_rel_l2(result: Result) -> float:
    return max((c.rel_l2_error for c in result.comparisons if not c.passed), default=0.0)


def _step_failed(error: Exception) -> str:
    """Why a case has no float64 step: the model's own code failing in it, or torchyard's (its one line naming
    torchyard's file, never the model)."""
    frames = traceback.extract_tb(error.__traceback__)
    if frames and Path(frames[-1].filename).resolve().is_relative_to(TORCHYARD):
        return (
            f"{REFERENCE_FAILED}the float64 step failed in torchyard's code, not the model's: {torchyards_fault(error)}"
        )
    return f"{REFERENCE_FAILED}the float64 step fails: {describe_error(error)}"
