"""Localization on failure (`evaluation.localize`): a wrong kernel planted in the middle of a deep program, only in its
lowering, is named at its node and nothing before it, and without the fault nothing is named; the built-in
`gelu_tanh` case's XNNPACK failure is named at its GELU; a wrong pass under torch.compile is named by the
bisector; a fault in the trace itself is blamed on torch.export; and a failing result carries it all."""

from __future__ import annotations

import contextlib
import dataclasses
import re
from pathlib import Path
from typing import Any

import pytest
import torch

from torchyard.contract import RunOptions
from torchyard.inimage.cases import Case
from torchyard.inimage.cases.files import InputFiles
from torchyard.inimage.evaluation.backends import NO_CACHE, unavailable_reason
from torchyard.inimage.evaluation.evaluations import Evaluations
from torchyard.inimage.evaluation.localize import Localization, localize
from torchyard.inimage.evaluation.localize.executorch import no_taps
from torchyard.inimage.evaluation.localize.inductor import STAGES
from torchyard.inimage.selftests.planted import (
    BY_NAME,
    RUN_ACCELERATOR,
    RUN_DEVICE,
    TOLERANCES,
    Deep,
    Switch,
    wrong_decomposition,
    wrong_tanh_pass,
)
from torchyard.inimage.start.settings import RunSettings
from torchyard.names import LOWERING_SUITES

pytestmark = pytest.mark.harness(*LOWERING_SUITES)  # but the training step's bisector: the train suite's

# Where ExecuTorch or its intermediate-output taps are absent (ExecuTorch 1.2), its nodes cannot be localized.
NO_EXECUTORCH = unavailable_reason("executorch-xnnpack", torch.device("cpu")) or no_taps()
DEEP = Case("planted_deep", Deep, lambda g: (torch.randn(4, 16, generator=g),))
SILU = torch.ops.aten.silu.default


def wrong_silu(x: torch.Tensor) -> torch.Tensor:
    """1% too steep: wrong by far more than float32's rounding, and only where the lowering runs it."""
    return x * torch.sigmoid(1.01 * x)


BEFORE_SILU = ["linear", "relu", "linear_1", "tanh", "linear_2"]
# These tests check where localization points, not how fast: a bound far above the run's default (60 s), which
# a bisection on a loaded 2-core machine ran past.
BOUND = 600.0


def localized(workdir: Path, case: str, backend: str, planted: bool) -> Localization:
    """Where `backend` diverges on `case` (DEEP's name or a built-in), with the wrong SiLU planted or not."""
    made = DEEP if case == DEEP.name else BY_NAME[case]
    with wrong_decomposition(SILU, wrong_silu) if planted else contextlib.nullcontext():
        return localize(made, backend, dtype=torch.float32, tolerances=TOLERANCES, workdir=workdir, time_bound=BOUND)


def lowered(*args: object) -> pytest.MarkDecorator:
    """Lowered to ExecuTorch in the child beside the run (its compiler is imported there, once for all)."""
    return pytest.mark.skip(reason=NO_EXECUTORCH) if NO_EXECUTORCH else pytest.mark.beside.with_args(localized, *args)


@pytest.mark.parametrize(
    "delegate",
    [
        pytest.param("XnnpackBackend (delegated subgraph)", marks=lowered(DEEP.name, "executorch-xnnpack", True)),
        pytest.param("portable kernel", marks=lowered(DEEP.name, "executorch-portable", True)),
    ],
)
def test_a_wrong_kernel_in_the_lowering_is_named_at_its_node_and_nothing_before_it(
    beside: Localization, delegate: str
) -> None:
    found = beside.node
    assert found is not None, beside.note
    assert (found.node, found.operator, found.delegate) == ("silu", "aten.silu.default", delegate)
    assert not found.error.passed and "relative L2 error" in found.error.problem
    assert [(name, error.passed) for name, error in found.inputs] == [("linear_2", True)]
    assert beside.compared == len(BEFORE_SILU) + 1  # each node before it compared, and within the bounds
    assert found.source.startswith("planted.py:") and found.source.endswith(" in forward")


@lowered(DEEP.name, "executorch-xnnpack", False)
def test_without_the_planted_kernel_no_node_diverges(beside: Localization) -> None:
    assert beside.node is None and beside.compared == 12
    assert beside.note.startswith("no node leaves the bounds on the case's first call (its outputs included")


def test_the_planted_kernel_is_in_the_lowering_only(tmp_path: Path) -> None:
    exported = localized(tmp_path, DEEP.name, "export", True)
    assert exported.node is None and exported.compared == 12, exported.note


@lowered("gelu_tanh", "executorch-xnnpack", False)
def test_gelu_tanh_on_xnnpack_is_named_at_its_gelu(beside: Localization) -> None:
    found = beside.node
    assert found is not None, beside.note
    assert (found.node, found.operator) == ("gelu", "aten.gelu.default")
    assert found.delegate == "XnnpackBackend (delegated subgraph)"
    assert found.source.startswith("builtin.py:") and found.source.endswith(" in forward")
    assert [(name, error.passed) for name, error in found.inputs] == [("linear", True)]
    assert beside.as_dict()["node"]["error"]["passed"] is False


def test_localization_gives_up_past_its_time_bound(tmp_path: Path) -> None:
    gave_up = localize(DEEP, "export", dtype=torch.float32, tolerances=TOLERANCES, workdir=tmp_path, time_bound=0)
    assert gave_up.node is None
    assert re.fullmatch(r"gave up after \d+ s \(time bound 0 s\), before the reference", gave_up.note), gave_up.note


def test_a_backend_it_cannot_localize_says_so(tmp_path: Path) -> None:
    result = localize(DEEP, "tensorrt", dtype=torch.float32, tolerances=TOLERANCES, workdir=tmp_path)
    assert result.node is None and result.note == "localization covers export, ExecuTorch and inductor, not tensorrt"


def bisected(workdir: Path, planted: bool) -> Localization:
    """Where inductor diverges on DEEP on the run's device (on a GPU, through Triton's kernels), with a wrong
    post-grad pass planted or not."""
    import torch._inductor.config  # inductor, imported only in the child that compiles

    wrong = {"post_grad_custom_post_pass": wrong_tanh_pass()} if planted else {}
    with torch._inductor.config.patch(wrong):
        return localize(
            DEEP, "inductor", dtype=torch.float32, tolerances=TOLERANCES, workdir=workdir, device=RUN_DEVICE,
            time_bound=BOUND,
        )  # fmt: skip


@pytest.mark.beside.with_args(bisected, True)
def test_a_wrong_pass_under_torch_compile_is_named_by_the_bisector(beside: Localization) -> None:
    """Every step of the bisection is a fresh compile: in the child beside the run."""
    assert beside.node is None and beside.note == "", beside.note
    assert beside.pass_name.startswith("inductor: post_grad_passes, post_grad_custom_post_pass (application ")


def settings_of(accelerator: str, workdir: Path, suite: str, seconds: int) -> RunSettings:
    """A run of one suite on `accelerator` whose localization may take `seconds`."""
    return RunSettings(
        accelerator, "fp32", workdir, TOLERANCES, (), (suite,), None, {}, RunOptions(localize_seconds=seconds)
    )


def bisected_train(workdir: Path) -> tuple[str, dict[str, Any] | None]:
    """DEEP's SGD step under torch.compile with the wrong post-grad pass planted, as the train suite evaluates
    it: its status and the `diverges` its result carries."""
    import torch._inductor.config  # inductor, imported only in the child that compiles

    settings = settings_of(RUN_ACCELERATOR, workdir, "train", int(BOUND))
    with torch._inductor.config.patch({"post_grad_custom_post_pass": wrong_tanh_pass()}):
        result = Evaluations(settings, workdir).train_result(DEEP, "train-inductor-sgd")
    return result.status, result.diverges


@pytest.mark.harness("train")
@pytest.mark.beside.with_args(bisected_train)
def test_a_wrong_pass_in_a_compiled_training_step_is_named_by_the_bisector(
    beside: tuple[str, dict[str, Any] | None],
) -> None:
    """The train suite's compiled step (forward and backward through AOTAutograd) with a pass that scales tanh:
    the failing step carries the bisector's answer."""
    status, diverges = beside
    assert status == "failed" and diverges is not None, diverges
    assert diverges["pass"].startswith("inductor: post_grad_passes, post_grad_custom_post_pass (application ")


def too_tight(workdir: Path) -> list[tuple[str, str, dict[str, Any] | None]]:
    """DEEP's eager and compiled SGD steps under bounds float32 cannot hold (a relative L2 of 1e-12): both miss
    the float64 step by float32's rounding, as a deep BatchNorm model misses the default bounds."""
    bounds = {"max-rel-l2": 1e-12, "max-scaled-error": 1e-12}
    tight = dataclasses.replace(DEEP, tolerances={f"float32.train-{k}-sgd": bounds for k in ("eager", "inductor")})
    settings = settings_of(RUN_ACCELERATOR, workdir, "train", int(BOUND))
    evaluations = Evaluations(settings, workdir)
    steps = [evaluations.train_result(tight, name) for name in ("train-inductor-sgd", "train-eager-sgd")]
    return [(step.backend, step.status, step.diverges) for step in steps]


@pytest.mark.harness("train")
@pytest.mark.beside.with_args(too_tight)
def test_a_compiled_step_that_misses_as_eager_does_is_not_blamed_on_a_compiler_step(
    beside: list[tuple[str, str, dict[str, Any] | None]],
) -> None:
    """Where eager's own float32 step misses by as much, no bisection runs: the note says the bounds are tighter
    than float32 holds (a pytorch-cifar adopter read 'the fault is in dynamo's trace' for float32's rounding)."""
    (compiled, status, diverges), (eager, eager_status, _) = beside
    assert (compiled, status, eager, eager_status) == ("train-inductor-sgd", "failed", "train-eager-sgd", "failed")
    assert diverges is not None and not diverges.get("pass"), diverges
    assert diverges["note"].startswith(
        "no compiler step to look for: the eager float32 step (train-eager-sgd) misses the float64 step too"
    ), diverges


def test_a_fault_in_the_trace_itself_is_blamed_on_torch_export(tmp_path: Path) -> None:
    """A model that computes otherwise when exported: every node meets its own float64 run, so the note says the
    exported program differs from the model before any lowering."""
    case = Case("export_scale", lambda: Switch("export", "scale"), lambda g: (torch.randn(4, 8, generator=g),))
    result = localize(case, "export", dtype=torch.float32, tolerances=TOLERANCES, workdir=tmp_path)
    assert result.node is None
    assert result.note.startswith("the exported program already differs from the model, before any lowering: ")
    assert "relative L2 error" in result.note


def test_a_model_copy_deepcopy_cannot_copy_is_localized_too(tmp_path: Path) -> None:
    """A model that keeps a `staticmethod` object on itself (rotary-embedding-torch's xpos option): localization
    builds a model of its own for each use rather than copying one."""

    def uncopyable() -> Switch:
        model = Switch("export", "scale")
        object.__setattr__(model, "kept", staticmethod(torch.tanh))  # a plain attribute, as nn.Module keeps one
        return model

    case = Case("export_scale_uncopyable", uncopyable, lambda g: (torch.randn(4, 8, generator=g),))
    result = localize(case, "export", dtype=torch.float32, tolerances=TOLERANCES, workdir=tmp_path)
    assert result.note.startswith("the exported program already differs from the model, before any lowering: ")


def evaluated(workdir: Path) -> tuple[str, dict[str, Any] | None]:
    """DEEP on ExecuTorch's portable kernels with the wrong SiLU planted, as the suites evaluate it: its status and
    the `diverges` its result carries into parity.json."""
    # ExecuTorch's programs run on the CPU, whatever the run's device.
    settings = settings_of("cpu", workdir, "parity", int(BOUND))
    evaluations = Evaluations(settings, workdir)
    evaluations.cache = NO_CACHE  # the self-tests leave the entry's artifact cache alone
    with wrong_decomposition(SILU, wrong_silu):
        result = evaluations.result(DEEP, "executorch-portable")
    return result.status, result.diverges


@(pytest.mark.skip(reason=NO_EXECUTORCH) if NO_EXECUTORCH else pytest.mark.beside.with_args(evaluated))
def test_a_failing_parity_result_carries_where_it_diverges(beside: tuple[str, dict[str, Any] | None]) -> None:
    status, diverges = beside
    assert status == "failed" and diverges is not None
    assert diverges["node"]["node"] == "silu" and diverges["node"]["delegate"] == "portable kernel"


@pytest.mark.parametrize("seconds", [0, 60])
def test_the_entrys_time_bound_turns_localization_off_at_zero(tmp_path: Path, seconds: int) -> None:
    """`localize-timeout = false` reaches the run as 0 seconds: a failing result then carries no `diverges`."""
    case = Case("export_scale", lambda: Switch("export", "scale"), lambda g: (torch.randn(4, 8, generator=g),))
    settings = settings_of("cpu", tmp_path, "parity", seconds)
    evaluations = Evaluations(settings, tmp_path)
    evaluations.cache = NO_CACHE
    result = evaluations.result(case, "export")
    assert result.status == "failed"
    assert (result.diverges is None) == (seconds == 0)


class Gate(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.into, self.out = torch.nn.Linear(16, 16), torch.nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gated: torch.Tensor = self.out(torch.nn.functional.silu(self.into(x)))
        return gated


def wrong_silu_on_large(x: torch.Tensor) -> torch.Tensor:
    """1% off where |x| > 20 only: right on small random inputs, wrong on a file's large ones."""
    return torch.where(x.abs() > 20, 1.01 * x * torch.sigmoid(x), x * torch.sigmoid(x))


def evaluated_batches(workdir: Path) -> tuple[str, str, dict[str, Any] | None]:
    """A case with a random batch (which passes) and one from a file (which does not) on ExecuTorch's portable
    kernels with the SiLU wrong on large values: its status, its reason, and where it diverges."""
    workdir.mkdir(parents=True, exist_ok=True)
    torch.save((100 * torch.randn(4, 16, generator=torch.Generator().manual_seed(1)),), workdir / "bright.pt")
    files = InputFiles([workdir / "bright.pt"], {"0": (torch.float32, (None, 16))})
    case = Case("planted_gate", Gate, lambda g: (torch.randn(4, 16, generator=g),), input_files=files)
    # ExecuTorch's programs run on the CPU, whatever the run's device.
    settings = settings_of("cpu", workdir, "parity", int(BOUND))
    evaluations = Evaluations(settings, workdir)
    evaluations.cache = NO_CACHE
    with wrong_decomposition(SILU, wrong_silu_on_large):
        result = evaluations.result(case, "executorch-portable")
    return result.status, result.reason, result.diverges


@(pytest.mark.skip(reason=NO_EXECUTORCH) if NO_EXECUTORCH else pytest.mark.beside.with_args(evaluated_batches))
def test_a_failing_batch_from_a_file_is_named_and_localized_on(beside: tuple[str, str, dict[str, Any] | None]) -> None:
    """Localized on the first call, this case would name no node: the random batch is right."""
    status, reason, diverges = beside
    assert status == "failed" and reason.startswith("batch bright.pt, output: "), reason
    assert diverges is not None and diverges["node"] is not None, diverges
    assert diverges["node"]["node"] == "silu" and diverges["node"]["delegate"] == "portable kernel"


def evaluated_known(workdir: Path) -> tuple[bool, dict[str, Any] | None]:
    """gelu_tanh on XNNPACK with its known wrong value naming its node: localized although it is known."""
    case = BY_NAME["gelu_tanh"]
    known = case.known_failure("executorch-xnnpack")
    assert known is not None
    named = {**case.known_failures, "executorch-xnnpack": dataclasses.replace(known, node="gelu")}
    # ExecuTorch's programs run on the CPU, whatever the run's device.
    settings = settings_of("cpu", workdir, "parity", int(BOUND))
    evaluations = Evaluations(settings, workdir)
    evaluations.cache = NO_CACHE
    result = evaluations.result(dataclasses.replace(case, known_failures=named), "executorch-xnnpack")
    return result.known_values, result.diverges


@(pytest.mark.skip(reason=NO_EXECUTORCH) if NO_EXECUTORCH else pytest.mark.beside.with_args(evaluated_known))
def test_a_known_wrong_value_that_names_its_node_is_localized(beside: tuple[bool, dict[str, Any] | None]) -> None:
    known_values, diverges = beside
    assert known_values and diverges is not None and diverges["node"] is not None, diverges
    assert diverges["node"]["node"] == "gelu"


def test_an_executorch_without_taps_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """ExecuTorch 1.2 has no intermediate-output taps: its nodes are not localized, and the note says why."""
    monkeypatch.setattr("torchyard.inimage.evaluation.localize.no_taps", lambda: "ExecuTorch 1.2.0 has no taps")
    result = localize(DEEP, "executorch-xnnpack", dtype=torch.float32, tolerances=TOLERANCES, workdir=tmp_path)
    assert result.node is None and result.note == "not localized: ExecuTorch 1.2.0 has no taps"
    assert no_taps() == "" or no_taps().startswith("ExecuTorch ")


@pytest.mark.harness("compile", "train")  # the bisector's: torch.compile's, in both
def test_every_stage_the_bisector_can_name_has_words() -> None:
    """A step named without a subsystem reads as the stage before inductor it is (it read `eager (no subsystem of
    it named)`): every backend of the bisector but inductor itself."""
    from torch._inductor.compiler_bisector import BACKENDS

    assert set(STAGES) == set(BACKENDS) - {"inductor"}
