"""The harness can fail: planted faults are caught, and a run that cannot test honestly fails closed."""

from __future__ import annotations

import dataclasses
import gc
import importlib.util
import json
import math
import os
import re
import subprocess
import sys
import weakref
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest
import torch

from torchyard import contract
from torchyard.inimage.cases import Call, Case, CaseLoadError, KnownFailure, load_cases
from torchyard.inimage.cases.builtin import CASES, XNNPACK_TANH_GELU, Attention, erf_gelu_block
from torchyard.inimage.freezer import Freezer
from torchyard.inimage.options import RunSettings
from torchyard.inimage.parity.backends import BACKENDS, BackendRun, Runner, executorch, unavailable_reason
from torchyard.inimage.parity.harness import Result, Status, evaluate, make_reference
from torchyard.inimage.parity.metrics import beyond_bounds
from torchyard.inimage.parity.tolerances import Bounds, load_tolerances
from torchyard.inimage.parity.trees import Leaf, leaves
from torchyard.inimage.precision import PrecisionError, check_precision
from torchyard.inimage.probe import ProbeError, check_device, check_kernel, torch_device, unlocked_environment
from torchyard.inimage.suites.conftest import _may_run_harness
from torchyard.inimage.suites.inner import PRELOAD, Beside, Job, WholeRun
from torchyard.inimage.verdicts import passes
from torchyard.inimage.workers import VISIBLE, device_count, pin_worker_device, worker_id, xdist_args, xdist_plugin_args
from torchyard.names import BACKEND_NAMES

pytestmark = pytest.mark.harness

CPU = torch.device("cpu")
# The run's own device (the probe checked it is there), for the self-tests that must hold on it.
RUN_DEVICE = torch_device(os.environ.get(contract.ACCELERATOR, "cpu"))
TOLERANCES = load_tolerances()
BY_NAME = {case.name: case for case in CASES}


Transform = Callable[[Any], Any]  # one output leaf: a tensor, or what else the case returns


def on_cpu(case: Case, runner: Runner, workdir: Path) -> Result:
    return evaluate(
        case, "planted", device=CPU, dtype=torch.float32, tolerances=TOLERANCES, workdir=workdir, runner=runner
    )


def planted(transform: Transform) -> Runner:
    """A backend that runs eager, then passes each output through `transform`."""

    def runner(
        case: Case, module: torch.nn.Module, calls: list[Call], device: torch.device, workdir: Path
    ) -> BackendRun:
        with torch.no_grad():
            outputs = [[transform(leaf) for leaf in leaves(module(*call.args, **call.kwargs))] for call in calls]
        return BackendRun(outputs, 0.0, 0.0)

    return runner


def run_planted(case_name: str, transform: Transform, tmp_path: Path) -> Result:
    return on_cpu(BY_NAME[case_name], planted(transform), tmp_path)


def test_reference_values_pass(tmp_path: Path) -> None:
    result = run_planted("mlp", lambda tensor: tensor, tmp_path)
    assert result.status == "passed"


def test_relative_perturbation_of_1e_3_fails_fp32(tmp_path: Path) -> None:
    result = run_planted("mlp", lambda tensor: tensor * (1 + 1e-3), tmp_path)
    assert result.status == "failed"
    assert "relative L2 error" in result.reason


def test_non_tensor_leaves_pass_as_eager_gives_them_and_fail_otherwise(tmp_path: Path) -> None:
    assert run_planted("optional_heads", lambda leaf: leaf, tmp_path / "same").status == "passed"
    flipped = run_planted("optional_heads", lambda leaf: not leaf if isinstance(leaf, bool) else leaf, tmp_path / "b")
    assert flipped.status == "failed" and "output [2]: True where eager gives False" in flipped.reason
    filled = run_planted("optional_heads", lambda leaf: torch.zeros(2) if leaf is None else leaf, tmp_path / "none")
    assert filled.status == "failed"
    assert "output [1][0]: a torch.float32 tensor of shape [2] where eager gives None" in filled.reason


def test_nan_fails(tmp_path: Path) -> None:
    def poison(tensor: torch.Tensor) -> torch.Tensor:
        tensor = tensor.clone()
        tensor.view(-1)[0] = float("nan")
        return tensor

    result = run_planted("mlp", poison, tmp_path)
    assert result.status == "failed"
    assert "non-finite" in result.reason


def test_integer_division_that_truncates_fails(tmp_path: Path) -> None:
    result = run_planted("int_divide_255", lambda tensor: tensor.to(torch.int64), tmp_path)
    assert result.status == "failed"
    assert "dtype torch.int64 differs from eager's torch.float32" in result.reason


def test_block_causal_mask_replaced_by_causal_fails(tmp_path: Path) -> None:
    case = BY_NAME["block_causal_attention"]

    def plain_causal(
        case: Case, module: torch.nn.Module, calls: list[Call], device: torch.device, workdir: Path
    ) -> BackendRun:
        wrong = Attention(frame=1)
        wrong.load_state_dict(module.state_dict())
        with torch.no_grad():
            return BackendRun([leaves(wrong(*call.args)) for call in calls], 0.0, 0.0)

    result = on_cpu(case, plain_causal, tmp_path)
    assert result.status == "failed"
    assert result.comparisons[0].scaled_max_error > 0.1


def test_channels_last_read_in_the_wrong_order_fails(tmp_path: Path) -> None:
    case = BY_NAME["conv_bn_channels_last"]

    def wrong_order(
        case: Case, module: torch.nn.Module, calls: list[Call], device: torch.device, workdir: Path
    ) -> BackendRun:
        # Reinterpret the NHWC bytes as if they were NCHW: the classic channels-last bug.
        outputs = []
        with torch.no_grad():
            for (image,) in (call.args for call in calls):
                misread = image.permute(0, 2, 3, 1).contiguous().view(image.shape)
                outputs.append(leaves(module(misread)))
        return BackendRun(outputs, 0.0, 0.0)

    assert on_cpu(case, wrong_order, tmp_path).status == "failed"


def test_noise_statistics_catch_a_constant(tmp_path: Path) -> None:
    assert run_planted("no_input_noise", lambda tensor: tensor, tmp_path).status == "passed"
    result = run_planted("no_input_noise", torch.zeros_like, tmp_path)
    assert result.status == "failed"
    assert "differ from eager's" in result.reason
    shifted = run_planted("no_input_noise", lambda tensor: tensor + 0.5, tmp_path)
    assert shifted.status == "failed"


def test_a_metric_at_its_bound_passes_and_one_step_beyond_fails() -> None:
    """Bounds are inclusive, each metric on its own: the comparisons that decide every parity verdict."""
    bounds = Bounds(max_scaled_error=1e-3, max_rel_l2=2e-3, min_cosine=0.999)
    assert beyond_bounds(1e-3, 2e-3, 0.999, bounds) == []
    assert beyond_bounds(0.0, 0.0, 1.0, bounds) == []
    scaled = beyond_bounds(math.nextafter(1e-3, 1.0), 2e-3, 0.999, bounds)
    rel_l2 = beyond_bounds(1e-3, math.nextafter(2e-3, 1.0), 0.999, bounds)
    cosine = beyond_bounds(1e-3, 2e-3, math.nextafter(0.999, 0.0), bounds)
    assert [len(scaled), len(rel_l2), len(cosine)] == [1, 1, 1]
    assert scaled[0].startswith("scaled max error") and rel_l2[0].startswith("relative L2 error")
    assert cosine[0].startswith("cosine")
    assert len(beyond_bounds(1.0, 1.0, 0.0, bounds)) == 3


def test_entry_tolerance_override_applies() -> None:
    loose = load_tolerances('{"float32.inductor": {"max-rel-l2": 0.5}}')
    assert loose.bounds("float32", "inductor").max_rel_l2 == 0.5
    assert loose.bounds("float32", "export").max_rel_l2 == 1e-5


def test_reference_is_float64_on_cpu() -> None:
    case = BY_NAME["mlp"]
    reference = make_reference(case, case.calls(), device=CPU, dtype=torch.float32)
    assert reference.kind == "float64 on cpu"
    first = reference.outputs[0][0]
    assert isinstance(first, torch.Tensor) and first.dtype == torch.float64 and first.device.type == "cpu"
    assert reference.expected_dtypes == [torch.float32]


def test_fp16_on_cpu_is_refused() -> None:
    with pytest.raises(PrecisionError, match="fp16 on the CPU is refused"):
        check_precision("fp16", "cpu")
    with pytest.raises(PrecisionError, match=r"compute capability 8.0 .* has 7.5"):
        check_precision("bf16", "cuda", (7, 5), hip=False)
    check_precision("bf16", "cuda", (8, 0), hip=False)
    check_precision("bf16", "cuda", (7, 5), hip=True)  # ROCm: HIP's bf16 does not follow NVIDIA's rule


SKIPPING_SUITE = """
pytest_plugins = ["torchyard.inimage.plugin"]
"""


# The settings the whole runs these tests start read from their own options, never from this run's.
# The whole runs' planted faults are sized for float32's bounds: the run's precision is not theirs.
OWN_SETTINGS = (
    contract.SUITES, contract.CASES, contract.BUILTIN_CASES, contract.TOLERANCES, contract.COMPILE_MODES,
    contract.PRECISION,
)  # fmt: skip
REPORTS = "--torchyard-report-dir={workdir}/r"


@pytest.fixture(autouse=True)
def _own_settings_only(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in OWN_SETTINGS:
        monkeypatch.delenv(name, raising=False)


def whole_run(*args: str, conftest: str = SKIPPING_SUITE, **modules: str) -> pytest.MarkDecorator:
    """This test's whole run, beside the suites (`inner.Beside`): a pytest session of its own over a
    conftest.py and `modules` (name: source), with `args`; the test takes its `pytest.RunResult` from
    the `beside` fixture."""
    files = ((("conftest.py", conftest),) if conftest else ()) + tuple(
        (f"{name}.py", source) for name, source in modules.items()
    )
    return pytest.mark.beside.with_args(WholeRun(files, args, unset=OWN_SETTINGS))


def test_every_backend_name_has_a_runner() -> None:
    assert tuple(BACKENDS) == BACKEND_NAMES


class KeylessOutput(dict):  # type: ignore[type-arg]
    """A model output registered as a pytree node without key paths, as diffusers registers its BaseOutput."""


torch.utils._pytree.register_pytree_node(
    KeylessOutput,
    lambda out: (list(out.values()), list(out.keys())),
    lambda values, keys: KeylessOutput(zip(keys, values, strict=True)),
    serialized_type_name=f"{__name__}.KeylessOutput",
)


class KeylessHeads(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> KeylessOutput:
        return KeylessOutput(sample=self.linear(x), extra=(x.sum(), None))


def test_an_output_type_without_key_paths_is_compared_by_its_keys(tmp_path: Path) -> None:
    """torch.export gives such a type its leaves; their paths come from its keys (diffusers' UNet2DOutput)."""
    case = Case("keyless", KeylessHeads, lambda g: (torch.randn(2, 4, generator=g),))
    result = evaluate(case, "export", device=CPU, dtype=torch.float32, tolerances=TOLERANCES, workdir=tmp_path)
    assert result.status == "passed", result.reason
    assert [comparison.output for comparison in result.comparisons] == ["['sample']", "['extra'][0]", "['extra'][1]"]


def test_dict_observation_policy_falls_back_to_a_float32_reference_visibly(tmp_path: Path) -> None:
    case = BY_NAME["dict_observation_policy"]
    result = evaluate(case, "export", device=CPU, dtype=torch.float32, tolerances=TOLERANCES, workdir=tmp_path)
    assert result.status == "passed", result.reason
    assert result.reference.startswith("float32 on cpu (float64 fails: RuntimeError")
    assert [comparison.output for comparison in result.comparisons] == ["['action']", "['value']"]


class Switch(torch.nn.Module):
    """Eager-correct; `wrong` changes the output when traced (compiled or exported), or only when exported:
    "scale" by 1e-3, "nan", or "shape" (one column fewer).

    Under torch.compile, torch 2.11's dynamo answers `is_exporting()` with True (2.14 answers False), so
    "compiled and not exported" cannot be told apart there: the compile fault fires under any trace, and
    only the inductor backend is checked with it."""

    def __init__(self, when: str, wrong: str) -> None:
        super().__init__()
        self.when, self.wrong = when, wrong
        self.linear = torch.nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        output: torch.Tensor = self.linear(x)
        active = torch.compiler.is_exporting() if self.when == "export" else torch.compiler.is_compiling()
        if active:
            wrong = {"scale": lambda: output * (1 + 1e-3), "nan": lambda: output + float("nan")}
            return wrong.get(self.wrong, lambda: output[..., :-1])()
        return output


@pytest.mark.parametrize(
    ("when", "wrong", "backend", "problem"),
    [
        ("compile", "scale", "inductor", "relative L2 error"),
        ("export", "scale", "export", "relative L2 error"),
        ("compile", "nan", "inductor", "non-finite"),
    ],
)
def test_faults_that_show_only_when_compiled_or_exported_are_caught(
    when: str, wrong: str, backend: str, problem: str, tmp_path: Path
) -> None:
    """On the run's device: there, inductor compiles what the suites compile (on a GPU, Triton kernels from the
    warm cache; torch 2.11 spends 40 s or more of every process on its first CPU compile, checking the CPU's
    vector instructions by starting Python ten times)."""
    case = Case(f"switch_{when}_{wrong}", lambda: Switch(when, wrong), lambda g: (torch.randn(4, 8, generator=g),))
    eager = evaluate(case, "eager", device=RUN_DEVICE, dtype=torch.float32, tolerances=TOLERANCES, workdir=tmp_path)
    assert eager.status == "passed", eager.reason
    result = evaluate(case, backend, device=RUN_DEVICE, dtype=torch.float32, tolerances=TOLERANCES, workdir=tmp_path)
    assert result.status == "failed" and problem in result.reason


def _result(status: Status, *, shapes: bool = True, artifact: str | None = None, backend: str = "export") -> Result:
    return Result("case", backend, "float32", status, shapes_match=shapes, artifact=artifact)


def test_each_suites_pass_rule(tmp_path: Path) -> None:
    """The rules the suites apply (`verdicts.passes`), outcome by outcome."""
    program, empty = tmp_path / "program.pte", tmp_path / "empty.pte"
    program.write_bytes(b"program")
    empty.write_bytes(b"")
    assert passes("parity", _result("passed"))
    assert not passes("parity", _result("failed")) and not passes("parity", _result("error", shapes=False))
    assert not passes("parity", _result("skipped"))
    assert passes("compile", _result("passed")) and passes("compile", _result("failed"))  # values are parity's
    assert not passes("compile", _result("failed", shapes=False)) and not passes("compile", _result("error"))
    assert passes("export", _result("failed", artifact=str(program)))
    assert not passes("export", _result("passed")) and not passes("export", _result("passed", artifact=str(empty)))
    assert not passes("export", _result("passed", shapes=False, artifact=str(program)))
    assert passes("runtime", _result("passed", backend="tensorrt"))  # its engine stays in memory
    assert not passes("runtime", _result("passed", backend="executorch-xnnpack"))
    assert not passes("runtime", _result("passed", backend="vulkan"))  # only TensorRT runs from memory
    assert passes("runtime", _result("failed", backend="executorch-xnnpack", artifact=str(program)))
    assert not passes("runtime", _result("skipped", backend="tensorrt"))
    assert passes("aot", _result("failed", backend="aotinductor", artifact=str(program)))  # values are parity's
    assert not passes("aot", _result("passed", backend="aotinductor"))  # no package on disk: not what it tests
    assert not passes("aot", _result("passed", backend="aotinductor", artifact=str(empty)))
    assert not passes("aot", _result("passed", shapes=False, backend="aotinductor", artifact=str(program)))


def test_an_opt_in_suites_backend_joins_parity_only_where_the_run_selected_its_suite() -> None:
    settings = RunSettings(
        accelerator="cpu", precision="fp32", report_dir=Path("reports"), tolerances=load_tolerances(),
        case_modules=(), builtin_cases=True, suites=("export", "parity"), compile_backends=("inductor",),
        vendor_record=None, precision_settings={},
    )  # fmt: skip
    assert "aotinductor" not in settings.parity_backends and "executorch-xnnpack" in settings.parity_backends
    chosen = dataclasses.replace(settings, suites=("parity", "aot"))
    assert chosen.parity_backends == tuple(BACKEND_NAMES)


PLANTED_CASES = """
import torch
from torchyard.inimage.cases import Case
from torchyard.inimage.suites.test_harness import Switch


def inputs(generator):
    return (torch.randn(4, 8, generator=generator),)


class Broken(torch.nn.Module):
    def forward(self, x):
        raise ValueError("the policy is broken")


CASES = [
    Case("scaled_when_traced", lambda: Switch("export", "scale"), inputs),
    Case("narrowed_when_traced", lambda: Switch("export", "shape"), inputs),
    Case("broken_everywhere", Broken, inputs),
]
"""


def shipped(module: str) -> str:
    return (Path(__file__).parent / module).read_text()


def shipped_run(cases: str, suites: tuple[str, ...], *args: str) -> pytest.MarkDecorator:
    """A whole run of the `suites` as they ship, over the cases of the module `cases` (its source) alone, their
    eager and export tests."""
    return whole_run(
        REPORTS,
        "--torchyard-cases=planted_cases",
        "--torchyard-no-builtin-cases",
        f"--torchyard-suites={','.join(suites)}",
        *("-k", "eager or export", "-p", "no:cacheprovider", *args),
        planted_cases=cases,
        **{f"test_{suite}": shipped(f"test_{suite}.py") for suite in suites},
    )


def reports_of(result: pytest.RunResult) -> Path:
    """The reports folder a whole run wrote, as its last lines name it."""
    (line,) = [line for line in result.stdout.lines if line.startswith("torchyard: reports in ")]
    return Path(line.removeprefix("torchyard: reports in ").split(" (")[0])


@shipped_run(PLANTED_CASES, ("export", "parity"), "-v")
def test_the_shipped_suites_fail_a_backend_that_computes_wrong_values(beside: pytest.RunResult) -> None:
    """The parity and export suites as they ship, over cases whose exported program is wrong, and one that
    cannot run at all: parity fails every wrong value and the export suite the wrong shape, while eager
    passes both; the model that cannot run fails once (parity's eager test) and is skipped elsewhere. The
    reports record what pytest said."""
    result = beside
    assert result.ret == 1
    result.stdout.fnmatch_lines_random(
        [
            "*test_export_save_load_run?scaled_when_traced? PASSED*",
            "*test_export_save_load_run?narrowed_when_traced? FAILED*",
            "*test_export_save_load_run?broken_everywhere? SKIPPED*",
            "*test_parity?scaled_when_traced-eager? PASSED*",
            "*test_parity?scaled_when_traced-export? FAILED*",
            "*test_parity?narrowed_when_traced-eager? PASSED*",
            "*test_parity?narrowed_when_traced-export? FAILED*",
            "*test_parity?broken_everywhere-eager? FAILED*",
            "*test_parity?broken_everywhere-export? SKIPPED*",
        ]
    )
    reports = reports_of(result)
    planted = {"scaled_when_traced", "narrowed_when_traced", "broken_everywhere"}  # an adopter's cases may join
    recorded = {
        (item["suite"], item["case"], item["backend"]): item["outcome"]
        for item in json.loads((reports / "parity.json").read_text())["results"]
        if item["case"] in planted
    }
    assert recorded == {
        ("export", "scaled_when_traced", "export"): "passed",
        ("export", "narrowed_when_traced", "export"): "failed",
        ("export", "broken_everywhere", "export"): "skipped",
        ("parity", "scaled_when_traced", "eager"): "passed",
        ("parity", "scaled_when_traced", "export"): "failed",
        ("parity", "narrowed_when_traced", "eager"): "passed",
        ("parity", "narrowed_when_traced", "export"): "failed",
        ("parity", "broken_everywhere", "eager"): "failed",
        ("parity", "broken_everywhere", "export"): "skipped",
    }


ADOPTER_CASES = """
import torch
from torchyard.inimage.cases import Case, KnownFailure


def inputs(generator):
    return (torch.randn(4, 8, generator=generator),)


class Broken(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(8, 8)

    def forward(self, x):
        raise ValueError("the policy is broken")


class Guarded(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(8, 8)

    def forward(self, x):
        if torch.compiler.is_exporting():
            raise RuntimeError("Could not guard on data-dependent expression Eq(u0, 1)")
        return self.linear(x)


class NoGradient(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, gradient):
        raise RuntimeError("no gradient here")


class ForwardOnly(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(8, 8)

    def forward(self, x):
        return NoGradient.apply(self.linear(x))


CASES = [
    Case("broken", Broken, inputs),
    Case("forward_only", ForwardOnly, inputs, backends=("eager", "train-eager-sgd", "train-eager-adamw")),
    Case(
        "guarded",
        Guarded,
        inputs,
        known_failures={"export": KnownFailure("upstream", raises="RuntimeError", match="expression Eq(u0, 1)")},
    ),
]
"""


@shipped_run(ADOPTER_CASES, ("export", "parity", "train"), "-v")
def test_a_failing_reference_fails_once_and_every_failure_is_one_line(beside: pytest.RunResult) -> None:
    """A model whose forward raises fails once, in parity's eager test; its export and train tests skip with
    the reason, their rows kept. A known failure whose `match` holds regular-expression characters that the
    message has as literal text fails saying how to escape them. No failure shows a traceback."""
    result = beside
    assert result.ret == 1
    failures = [line for line in result.stdout.lines if line.startswith(("E  ", ">  "))]
    assert not failures, failures  # pytest's traceback lines: none, torchyard's own code least of all
    output = result.stdout.str()
    assert "guarded on export (export): expected the known failure RuntimeError matching" in output
    assert "but match is a regular expression (as in pytest.raises) that does not match it there: write " in output
    assert "match=re.escape('expression Eq(u0, 1)')" in output
    reports = reports_of(result)
    recorded = {
        (item["suite"], item["backend"]): (item["outcome"], item["reason"])
        for item in json.loads((reports / "parity.json").read_text())["results"]
        if item["case"] == "broken"
    }
    assert recorded.pop(("parity", "eager"))[0] == "failed"
    because = "no reference: eager on cpu fails: ValueError: the policy is broken"
    assert {key: (outcome, reason.split(" (at ")[0]) for key, (outcome, reason) in recorded.items()} == {
        key: ("skipped", because) for key in [("export", "export"), ("parity", "export"),
                                              ("train", "train-eager-sgd"), ("train", "train-eager-adamw")]
    }  # fmt: skip
    assert all(reason.endswith("(failed once, in test_parity[broken-eager])") for _, reason in recorded.values())
    trained = {
        item["backend"]: (item["outcome"], item["reason"])
        for item in json.loads((reports / "parity.json").read_text())["results"]
        if item["case"] == "forward_only" and item["suite"] == "train"
    }  # its forward works (parity's eager test passes), its step does not: the step's first test fails
    assert trained["train-eager-sgd"][0] == "failed"
    assert trained["train-eager-sgd"][1].startswith("reference: the eager training step fails on cpu: RuntimeError")
    assert trained["train-eager-adamw"][0] == "skipped"
    assert trained["train-eager-adamw"][1].endswith(
        "(failed once, in test_one_step_matches_the_float64_step[forward_only-train-eager-sgd])"
    )
    result.stdout.fnmatch_lines(["*test_parity?forward_only-eager? PASSED*"])
    markdown = (reports / "parity.md").read_text().splitlines()
    assert markdown[2].startswith("**") and "FAIL" in markdown[2]  # the summary opens the report
    assert any(
        line.startswith("- FAIL: `broken` on eager (parity): reference: eager on cpu fails") for line in markdown
    )


def test_a_model_that_cannot_run_fails_once_with_the_reason(tmp_path: Path) -> None:
    class Broken(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            raise ValueError("the policy is broken")

    case = Case("broken", Broken, lambda g: (torch.randn(2, 2, generator=g),))
    result = evaluate(case, "inductor", device=CPU, dtype=torch.float32, tolerances=TOLERANCES, workdir=tmp_path)
    assert result.status == "error"
    assert result.reason.startswith("reference: eager on cpu fails: ValueError: the policy is broken")


def test_known_failures_name_the_exact_error() -> None:
    known = KnownFailure("upstream bug", raises="SpecViolationError", match=r"mismatched dtypes")
    assert known.matches(["SpecViolationError", "Exception"], "taking Tensor inputs with mismatched dtypes")
    assert not known.matches(["ImportError", "Exception"], "taking Tensor inputs with mismatched dtypes")
    assert not known.matches(["SpecViolationError"], "something else entirely")
    with pytest.raises(ValueError, match="must be a KnownFailure"):
        Case("old_style", torch.nn.Identity, lambda g: (), known_failures={"export": "a string"})  # type: ignore[dict-item]
    with pytest.raises(ValueError, match="unknown backend 'exprot'"):
        Case("typo", torch.nn.Identity, lambda g: (), backends=("exprot",))
    with pytest.raises(ValueError, match="one of the two"):
        KnownFailure("says nothing")
    with pytest.raises(ValueError, match="one of the two"):
        KnownFailure("says both", raises="RuntimeError", match="x", computes=torch.nn.Identity)
    with pytest.raises(ValueError, match="needs both raises and match"):
        KnownFailure("any message at all", raises="RuntimeError")


def test_match_is_a_regular_expression_and_literal_text_in_the_message_says_how_to_escape() -> None:
    """As pytest.raises(match=): searched for, a regular expression. A message that holds the pattern as text
    that the expression does not match (its parentheses are a group) is told apart, with the fix."""
    message = "Could not guard on data-dependent expression Eq(u0, 1)"
    literal = KnownFailure("upstream", raises="RuntimeError", match="Eq(u0, 1)")
    assert not literal.matches(["RuntimeError"], message)
    assert literal.mismatch(["RuntimeError"], message) == (
        "its message holds 'Eq(u0, 1)' as literal text, but match is a regular expression (as in pytest.raises) "
        "that does not match it there: write match=re.escape('Eq(u0, 1)')"
    )
    escaped = KnownFailure("upstream", raises="RuntimeError", match=re.escape("Eq(u0, 1)"))
    assert escaped.matches(["RuntimeError"], message) and escaped.mismatch(["RuntimeError"], message) == ""
    assert KnownFailure("upstream", raises="RuntimeError", match=r"Eq\(u\d+, 1\)").matches(["RuntimeError"], message)
    assert literal.mismatch(["ValueError", "Exception"], "other") == (
        "it raised ValueError, not RuntimeError; its message does not match 'Eq(u0, 1)'"
    )
    assert KnownFailure("wrong values", computes=torch.nn.Identity).mismatch(["ValueError"], "any") == ""
    with pytest.raises(ValueError, match=re.escape("to match it as literal text, write match=re.escape('f(x')")):
        KnownFailure("unbalanced", raises="RuntimeError", match="f(x")


def computing(make: Callable[[], torch.nn.Module], scale: float = 1.0) -> Runner:
    """A backend that gives what another model (same seed, so same weights) computes, times `scale`."""

    def runner(
        case: Case, module: torch.nn.Module, calls: list[Call], device: torch.device, workdir: Path
    ) -> BackendRun:
        dtype = next(module.parameters()).dtype
        other = dataclasses.replace(case, make_module=make).module().to(dtype)
        with torch.no_grad():
            outputs: list[list[Leaf]] = [
                [
                    leaf * scale if isinstance(leaf, torch.Tensor) else leaf
                    for leaf in leaves(other(*call.args, **call.kwargs))
                ]
                for call in calls
            ]
        program = workdir / "program.bin"  # as a runtime's lowered program lies on disk
        program.write_bytes(b"program")
        return BackendRun(outputs, 0.0, 0.0, artifact=program)

    return runner


def test_known_wrong_values_are_exact(tmp_path: Path) -> None:
    """gelu_tanh on XNNPACK is known to compute erf GELU: exactly that is known, nothing near it."""
    case = BY_NAME["gelu_tanh"]
    known = case.known_failure("executorch-xnnpack")
    assert known is not None and known.computes is erf_gelu_block

    def on_xnnpack(runner: Runner, name: str, dtype: torch.dtype = torch.float32) -> Result:
        return evaluate(
            case, "executorch-xnnpack", device=CPU, dtype=dtype, tolerances=TOLERANCES,
            workdir=tmp_path / name, runner=runner,
        )  # fmt: skip

    as_known = on_xnnpack(computing(erf_gelu_block), "known")
    assert (as_known.status, as_known.known_values) == ("failed", True), as_known.reason
    assert "relative L2 error" in as_known.reason  # the two GELUs do differ beyond the float32 bounds
    near = on_xnnpack(computing(erf_gelu_block, scale=1.001), "near")
    assert (near.status, near.known_values) == ("failed", False)
    fixed = on_xnnpack(computing(case.make_module), "fixed")
    assert (fixed.status, fixed.known_values) == ("passed", False)
    # bfloat16's bounds are wider than the bug: both GELUs pass, and the two cannot be told apart.
    coarse = on_xnnpack(computing(erf_gelu_block), "bf16", dtype=torch.bfloat16)
    assert (coarse.status, coarse.known_values) == ("passed", True), coarse.reason


KNOWN_VALUES_SUITE = """
import pytest
import torch
from torchyard.inimage.cases.builtin import CASES, erf_gelu_block
from torchyard.inimage.parity.harness import evaluate
from torchyard.inimage.parity.tolerances import load_tolerances
from torchyard.inimage.outcomes import conclude
from torchyard.inimage.suites.test_harness import computing

CASE = next(case for case in CASES if case.name == "gelu_tanh")


def result(runner, tmp_path, dtype=torch.float32):
    return evaluate(
        CASE, "executorch-xnnpack", device=torch.device("cpu"), dtype=dtype,
        tolerances=load_tolerances(), workdir=tmp_path, runner=runner,
    )


@pytest.mark.parity
def test_as_known(request, tmp_path):
    r = result(computing(erf_gelu_block), tmp_path)
    conclude(request, "parity", CASE, r)


@pytest.mark.parity
def test_other_wrong_values(request, tmp_path):
    r = result(computing(erf_gelu_block, scale=1.001), tmp_path)
    conclude(request, "parity", CASE, r)


@pytest.mark.parity
def test_fixed(request, tmp_path):
    r = result(computing(CASE.make_module), tmp_path)
    conclude(request, "parity", CASE, r)


@pytest.mark.parity
def test_as_known_in_bfloat16(request, tmp_path):
    r = result(computing(erf_gelu_block), tmp_path, dtype=torch.bfloat16)
    conclude(request, "parity", CASE, r)


@pytest.mark.runtime
def test_runs(request, tmp_path):
    r = result(computing(erf_gelu_block), tmp_path)
    conclude(request, "runtime", CASE, r)
"""


@whole_run(REPORTS, "-v", test_known_values=KNOWN_VALUES_SUITE)
def test_known_wrong_values_xfail_only_as_known_and_only_where_values_are_compared(beside: pytest.RunResult) -> None:
    result = beside
    assert result.ret == 1
    result.stdout.fnmatch_lines(
        [
            "*::test_as_known XFAIL*",
            "*::test_other_wrong_values FAILED*",
            "*::test_fixed FAILED*",
            "*::test_as_known_in_bfloat16 PASSED*",
            "*::test_runs PASSED*",
        ],
        consecutive=False,
    )
    output = result.stdout.str()
    assert "expected the known wrong values (what erf_gelu_block computes), got failed" in output
    assert "now works: remove its known failure" in output
    assert not [line for line in result.stdout.lines if line.startswith(("E  ", ">  "))]  # one line each
    recorded = json.loads((reports_of(result) / "parity.json").read_text())["results"]
    (coarse,) = [item["reason"] for item in recorded if item["dtype"] == "bfloat16"]
    (ran,) = [item["reason"] for item in recorded if item["suite"] == "runtime"]
    assert ran.startswith("passes the runtime rule (the program loaded and ran with eager's output shapes); its ")
    assert coarse == (
        "passes: these bounds cannot tell the reference from the known wrong values (what erf_gelu_block "
        f"computes) ({XNNPACK_TANH_GELU.reason})"
    )


WRONG_ERROR_SUITE = """
import pytest
import torch
from pathlib import Path
from torchyard.inimage.cases import Case, KnownFailure
from torchyard.inimage.parity.harness import evaluate
from torchyard.inimage.parity.tolerances import load_tolerances
from torchyard.inimage.outcomes import conclude


CASE = Case(
    "renamed",
    torch.nn.Identity,
    lambda g: (torch.randn(2, generator=g),),
    known_failures={"export": KnownFailure("upstream bug", raises="SpecViolationError", match="mismatched")},
)


class SpecViolationError(Exception):
    pass


def runner(case, module, calls, device, workdir):
    raise ImportError("cannot import name 'old_name' (a rename, not the upstream bug)")


def as_known(case, module, calls, device, workdir):
    raise SpecViolationError("mismatched dtypes in node 3")


def concluded(request, tmp_path, backend_runner):
    result = evaluate(
        CASE, "export", device=torch.device("cpu"), dtype=torch.float32, tolerances=load_tolerances(),
        workdir=tmp_path, runner=backend_runner,
    )
    conclude(request, "export", CASE, result)


@pytest.mark.export
def test_export(request, tmp_path):
    concluded(request, tmp_path, runner)


@pytest.mark.export
def test_export_as_known(request, tmp_path):
    concluded(request, tmp_path, as_known)
"""


@whole_run(REPORTS, "-p", "no:cacheprovider", test_wrong=WRONG_ERROR_SUITE)
def test_a_different_error_under_a_known_failure_fails(beside: pytest.RunResult) -> None:
    """Only the error a known failure names is expected: the same backend raising another one fails."""
    result = beside
    assert result.ret == 1
    result.stdout.fnmatch_lines(["*expected the known failure SpecViolationError matching 'mismatched', got error*"])
    outcomes = result.parseoutcomes()
    assert (outcomes["failed"], outcomes["xfailed"]) == (1, 1), outcomes


def mixed_suites(export_body: str) -> str:
    """A module of a harness self-test, an export test with this body and a compile test that passes."""
    return (
        "import pytest\n\n"
        "@pytest.mark.harness\ndef test_self():\n    pass\n\n"
        f"@pytest.mark.export\ndef test_export():\n    {export_body}\n\n"
        "@pytest.mark.compile\ndef test_compile():\n    pass\n"
    )


@whole_run(REPORTS, "--torchyard-suites=export,compile", test_mixed=mixed_suites("pytest.skip('no exporter here')"))
def test_a_selected_suite_with_nothing_passed_fails_the_run(beside: pytest.RunResult) -> None:
    result = beside
    assert result.ret == 1
    result.stdout.fnmatch_lines(["*suite export: no test passed; skip reasons: no exporter here*"])
    assert "suite compile" not in result.stdout.str()


@(
    pytest.mark.skip(reason="this machine has a CUDA device: the missing-device path cannot be shown here")
    if torch.cuda.is_available()
    else whole_run(
        "--torchyard-accelerator",
        "cuda",
        REPORTS,
        test_never="def test_never():\n    raise AssertionError('must not run')\n",
    )
)
def test_cuda_entry_without_a_cuda_device_fails_before_testing(beside: pytest.RunResult) -> None:
    result = beside
    assert result.ret == 3
    result.stderr.fnmatch_lines(["*torchyard probe: entry targets CUDA but *"])
    assert "must not run" not in result.stdout.str()


@whole_run(REPORTS, test_self="import pytest\n\n@pytest.mark.harness\ndef test_self():\n    pass\n")
def test_a_run_where_only_the_harness_passed_fails(beside: pytest.RunResult) -> None:
    """The self-tests never stand for the suites: passing alone, they leave the run failed."""
    assert beside.ret == 1
    beside.stdout.fnmatch_lines(["*torchyard: FAILED: no test passed (every test skipped, or none ran)*"])


@whole_run(
    REPORTS,
    "--torchyard-suites=export,compile",
    test_each=mixed_suites("pass") + "\n@pytest.mark.export\ndef test_export_skipped():\n    pytest.skip('not here')\n",
)
def test_a_run_where_each_selected_suite_passed_a_test_passes(beside: pytest.RunResult) -> None:
    assert beside.ret == 0, beside.stdout.lines[-20:]
    assert "FAILED" not in beside.stdout.str()


@whole_run(REPORTS, test_mine="def test_mine():\n    pass\n")
def test_a_run_of_a_projects_own_tests_that_pass_passes(beside: pytest.RunResult) -> None:
    """No suite selected, the project's tests alone: they count as tests that passed."""
    assert beside.ret == 0, beside.stdout.lines[-20:]


@whole_run(REPORTS, test_skips="import pytest\n\ndef test_a():\n    pytest.skip('no device')\n")
def test_all_skipped_run_fails(beside: pytest.RunResult) -> None:
    result = beside
    assert result.ret == 1
    result.stdout.fnmatch_lines(["*FAILED: suite project: no test passed; skip reasons: no device*"])


@whole_run(REPORTS)
def test_no_test_collected_fails(beside: pytest.RunResult) -> None:
    assert beside.ret == 1


# The CPU named: a run on a GPU would otherwise hand its accelerator on, where fp16 is allowed.
@whole_run(
    "--torchyard-accelerator", "cpu", "--torchyard-precision", "fp16", REPORTS, test_ok="def test_ok():\n    pass\n"
)
def test_fp16_on_cpu_stops_the_run(beside: pytest.RunResult) -> None:
    result = beside
    assert result.ret == 3
    result.stderr.fnmatch_lines(["*fp16 on the CPU is refused*"])


def test_user_cases_load_from_a_named_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "my_cases.py").write_text(
        "import torch\n"
        "from torchyard.inimage.cases import Case\n\n"
        "class Scale(torch.nn.Module):\n"
        "    def forward(self, x):\n"
        "        return x * 3\n\n"
        'CASES = [Case("user_scale", Scale, lambda generator: (torch.randn(4, 8, generator=generator),))]\n'
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    cases = load_cases(["my_cases"], use_entry_points=False)
    assert [case.name for case in cases[-1:]] == ["user_scale"]
    result = evaluate(cases[-1], "export", device=CPU, dtype=torch.float32, tolerances=TOLERANCES, workdir=tmp_path)
    assert result.status == "passed"
    with pytest.raises(CaseLoadError, match="cannot be imported"):
        load_cases(["no_such_cases_module"], use_entry_points=False)
    (tmp_path / "bad_cases.py").write_text("CASES = [1]\n")
    with pytest.raises(CaseLoadError, match="must define CASES"):
        load_cases(["bad_cases"], use_entry_points=False)


def test_mps_precision_rules() -> None:
    with pytest.raises(PrecisionError, match=r"bf16 on MPS needs macOS 14 or newer; this Mac runs 13.6"):
        check_precision("bf16", "mps", macos=(13, 6))
    check_precision("bf16", "mps", macos=(14, 0))
    check_precision("fp16", "mps", macos=(13, 0))


def test_an_mps_entry_off_apple_silicon_fails_closed() -> None:
    if torch.backends.mps.is_available():
        pytest.skip("this machine has an MPS device: the missing-device path cannot be shown here")
    with pytest.raises(ProbeError, match=r"entry targets MPS but no MPS device is available .* MPS needs macOS"):
        check_device("mps")


def test_a_cuda_entry_without_a_usable_device_gives_torchs_own_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    """is_available() only says False; torch's init() says why (here: a build without CUDA, the nearest this
    machine has to a driver too old for the build), and the probe passes that on."""
    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA device: the missing-device path cannot be shown here")
    monkeypatch.setattr(torch.version, "cuda", torch.version.cuda or "13.0")
    monkeypatch.setattr(torch.version, "hip", None)
    with pytest.raises(ProbeError) as caught:
        check_device("cuda")
    message = str(caught.value)
    assert message.startswith("entry targets CUDA but no CUDA device is usable (torch ")
    assert "; torch says: " in message and "(`torchyard doctor`)" in message


def test_a_device_whose_first_kernel_fails_is_named_with_the_builds_targets(monkeypatch: pytest.MonkeyPatch) -> None:
    """A ROCm build without the GPU's gfx target is 'available' and fails at its first kernel."""

    def no_kernel(*args: object, **kwargs: object) -> torch.Tensor:
        raise RuntimeError("HIP error: invalid device function\nmore detail")

    monkeypatch.setattr(torch, "ones", no_kernel)
    monkeypatch.setattr(torch.cuda, "get_arch_list", lambda: ["gfx90a", "gfx942"])
    with pytest.raises(ProbeError) as caught:
        check_kernel(torch.device("cuda"), "torch 2.9.1 is a ROCm/HIP 7.2 build")
    assert str(caught.value) == (
        "a first kernel on cuda failed (torch 2.9.1 is a ROCm/HIP 7.2 build): RuntimeError: HIP error: invalid "
        "device function; this build's GPU targets: gfx90a gfx942"
    )


def test_an_unlocked_manifest_lists_every_package_and_the_lock_differences(tmp_path: Path) -> None:
    lock = tmp_path / "lock.txt"
    lock.write_text(
        f"torch=={version('torch')} \\\n    --hash=sha256:00\nnot-installed-here==1.0 \\\n    --hash=sha256:11\n"
    )
    info = unlocked_environment(lock)
    assert info["environment"] == "unlocked: this environment"
    packages = {package["name"]: package for package in info["packages"]}
    assert packages["torch"]["version"] == version("torch") and packages["pytest"]["origin"]
    assert "not-installed-here: not installed (lock: 1.0)" in info["lock_differences"]
    assert not any(line.startswith("torch:") for line in info["lock_differences"])
    assert unlocked_environment("")["lock_differences"] == ["no lockfile to compare with"]


@whole_run(
    "--torchyard-cases=broken_cases",
    REPORTS,
    broken_cases="raise RuntimeError('boom at import')\n",
    test_uses_cases="def test_case(case):\n    pass\n",
)
def test_a_cases_module_that_raises_is_one_line(beside: pytest.RunResult) -> None:
    result = beside
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    output = result.stdout.str() + result.stderr.str()
    assert "torchyard: cases module 'broken_cases' cannot be imported: RuntimeError: boom at import" in output
    assert "Traceback" not in output and "ERROR collecting" not in output


def test_the_builtin_corpus_can_be_left_out() -> None:
    assert load_cases([], use_entry_points=False, builtin=False) == []
    assert {case.name for case in load_cases([], use_entry_points=False)} >= {"mlp", "dict_observation_policy"}


XDIST = importlib.util.find_spec("xdist") is not None  # an adopter's lock need not have it


@(
    whole_run(
        *xdist_plugin_args({contract.AUTOLOAD_OFF: "1"}),
        *("-n", "0", "-p", "no:cacheprovider", "-p", "no:torchyard.inimage.plugin"),
        conftest="",
        test_one="def test_one():\n    pass\n",
    )
    if XDIST
    else pytest.mark.skip(reason="pytest-xdist is not installed in this image")
)
def test_workers_start_with_plugin_autoloading_off(beside: pytest.RunResult) -> None:
    """torchyard's suites alone run with pytest's plugin autoloading off; xdist is then named, and loads."""
    assert xdist_plugin_args({}) == []
    assert xdist_plugin_args({contract.AUTOLOAD_OFF: "1"}) == ["-p", "xdist.plugin"]
    assert beside.ret == 0, beside.stderr.lines  # `-n` is an option only xdist's plugin adds


class _Cycle:
    def __init__(self) -> None:
        self.me = self


def test_the_collector_freezes_after_imports_and_frees_young_cycles_first(monkeypatch: pytest.MonkeyPatch) -> None:
    assert gc.isenabled()  # the entry point starts with it off: it must be on once tests run
    freezes: list[int] = []  # counted, not read from gc.get_freeze_count: that walks every frozen object (0.03 s)
    freeze = gc.freeze

    def counted() -> None:
        freezes.append(1)
        freeze()

    monkeypatch.setattr(gc, "freeze", counted)
    freezer = Freezer()
    freezer.freeze()
    freezer.after_test()  # no test imported anything: nothing more is frozen
    assert len(freezes) == 1
    garbage = _Cycle()
    gone = weakref.ref(garbage)
    del garbage  # a reference cycle: only the cyclic collector frees it
    for index in range(Freezer.NEW_MODULES):  # as if a test had imported a library
        monkeypatch.setitem(sys.modules, f"torchyard_planted_module_{index}", ModuleType("planted"))
    freezer.after_test()
    assert len(freezes) == 2
    assert gone() is None  # freed before the freeze, not kept for the rest of the run


def test_workers_one_per_gpu_none_on_the_cpu() -> None:
    assert xdist_args([], "cpu", 0) == []
    assert xdist_args([], "cuda", 1) == []  # one device: in-process, no worker start-up
    assert xdist_args([], "cuda", 4) == ["-n", "4", "--dist", "loadgroup"]
    assert xdist_args(["-n", "2"], "cuda", 4) == []  # the caller's choice stands
    env = {"CUDA_VISIBLE_DEVICES": "2,3"}
    pin_worker_device("cuda", "gw1", env)
    assert env == {"CUDA_VISIBLE_DEVICES": "3"}
    env = {}
    pin_worker_device("rocm", "gw0", env)
    assert env == {"HIP_VISIBLE_DEVICES": "0"}
    pin_worker_device("cpu", "gw0", env)  # nothing to pin on the CPU
    assert env == {"HIP_VISIBLE_DEVICES": "0"}
    # A ROCm runner that gave the job GPUs 4 and 5 as CUDA_VISIBLE_DEVICES (HIP reads it too): worker 1
    # takes 5, never HIP's device 1, another job's; HIP_VISIBLE_DEVICES, where set, is the list HIP uses.
    env = {"CUDA_VISIBLE_DEVICES": "4,5"}
    pin_worker_device("rocm", "gw1", env)
    assert env == {"CUDA_VISIBLE_DEVICES": "4,5", "HIP_VISIBLE_DEVICES": "5"}
    env = {"CUDA_VISIBLE_DEVICES": "0,1,2,3", "HIP_VISIBLE_DEVICES": "2,3"}
    pin_worker_device("rocm", "gw0", env)
    assert env == {"CUDA_VISIBLE_DEVICES": "0,1,2,3", "HIP_VISIBLE_DEVICES": "2"}


def tf32_error(device: torch.device) -> float:
    """The relative error of a float32 matrix product on `device` against float64 on the CPU."""
    generator = torch.Generator().manual_seed(0)
    a, b = (torch.randn(512, 512, generator=generator, dtype=torch.float64) for _ in range(2))
    exact = a @ b
    got = (a.float().to(device) @ b.float().to(device)).cpu().double()
    return float((got - exact).norm() / exact.norm())


CASE_SUITE = "def test_case(case):\n    pass\n"
GROUPED_SUITE = """
import os


def test_compiles(case, request):
    assert request.node.nodeid.endswith("@" + case.name), request.node.nodeid


def test_compares(case, request):
    assert request.node.nodeid.endswith("@" + case.name), request.node.nodeid
    assert os.environ["PYTEST_XDIST_WORKER"].startswith("gw")
"""


@(
    whole_run(
        *xdist_plugin_args({contract.AUTOLOAD_OFF: "1"}),
        *("-n", "2", "--dist", "loadgroup", "-p", "no:cacheprovider"),
        REPORTS,
        test_grouped=GROUPED_SUITE,
    )
    if XDIST
    else pytest.mark.skip(reason="pytest-xdist is not installed in this image")
)
def test_a_cases_tests_go_to_one_worker(beside: pytest.RunResult) -> None:
    """`--dist loadgroup` sends each case's tests (compile, parity, export, runtime) to one worker, which makes
    the case's reference once and compiles it once: xdist names the group in each item's id, from the marks
    the plugin adds, which it must add first. Two workers, every built-in case's tests: each test checks
    its own id. The check `pytest<9.2` in the locks stands on (pytest-dev/pytest-xdist#1386)."""
    outcomes = beside.parseoutcomes()
    # At least the built-in cases' tests: an adopter's own cases (its entry points) join them.
    assert beside.ret == 0 and outcomes.get("passed", 0) >= 2 * len(CASES), beside.stdout.lines[-30:]


@whole_run("-p", "no:xdist", "--strict-markers", "-p", "no:cacheprovider", REPORTS, test_cases=CASE_SUITE)
def test_a_run_without_xdist_marks_no_group(beside: pytest.RunResult) -> None:
    """Without xdist (`-p no:xdist`, or a lock without it) its `xdist_group` mark is unknown: an adopter saw
    `PytestUnknownMarkWarning` for it, and under --strict-markers the run stopped before its first test."""
    assert beside.ret == 0, beside.stdout.lines[-20:]
    assert "xdist_group" not in beside.stdout.str()


def test_float32_matrix_products_on_the_run_device_are_full_precision() -> None:
    """TF32 (a 10-bit mantissa) puts a 512-deep float32 product about 1e-4 off float64; full float32 about
    1e-7. The run pinned TF32 off: this checks that the device computed it so."""
    error = tf32_error(RUN_DEVICE)
    assert error < 1e-5, f"float32 matmul on {RUN_DEVICE} is {error:.1e} off float64: TF32 or lower precision is on"


def test_a_worker_sees_only_its_own_device(request: pytest.FixtureRequest) -> None:
    """In an xdist worker on a GPU, the visible-device variable names one device and torch sees one: what
    `pin_worker_device` set before torch touched the device holds."""
    accelerator = os.environ.get(contract.ACCELERATOR, "cpu")
    worker = worker_id(request.config)
    variable = VISIBLE.get(accelerator)
    if worker == "main" or variable is None:
        pytest.skip("no worker's device to check: " + ("not an xdist worker" if worker == "main" else accelerator))
    visible = os.environ.get(variable, "")
    assert visible and "," not in visible, f"{worker}: {variable}={visible!r}"
    assert device_count(accelerator) == 1, f"{worker}: {variable}={visible!r}"


def test_the_fork_server_ends_without_tearing_down(tmp_path: Path) -> None:
    """Its exit handler runs before every handler registered before it (the server's imports'), and ends
    the process there: what those would have done is never done."""
    assert PRELOAD[-1] == "torchyard.inimage.suites.server_last"
    torn_down = tmp_path / "torn-down"
    handler = f"import atexit; atexit.register(open, {str(torn_down)!r}, 'w')"
    script = f"{handler}\nimport torchyard.inimage.suites.server_last"
    completed = subprocess.run([sys.executable, "-c", script], check=False, capture_output=True, text=True)
    assert completed.returncode == 0, completed.stderr
    assert not torn_down.exists()
    assert subprocess.run([sys.executable, "-c", handler], check=False).returncode == 0
    assert torn_down.exists()  # the check can fail: without the module, the handler runs


def test_the_fork_server_starts_at_configuration_where_the_harness_may_run(request: pytest.FixtureRequest) -> None:
    def config(expression: str, workers: int | None = None, worker: bool = False) -> Any:
        stub = SimpleNamespace(option=SimpleNamespace(numprocesses=workers), getoption=lambda name, default: expression)
        if worker:
            stub.workerinput = {"workerid": "gw0"}
        return stub

    assert _may_run_harness(request.config)  # this very test is the harness's
    assert _may_run_harness(config("")) and _may_run_harness(config("export or harness"))
    assert not _may_run_harness(config("export or compile"))
    assert not _may_run_harness(config("not harness")) and _may_run_harness(config("not export"))
    assert not _may_run_harness(config("harness", workers=2))  # an xdist controller: its workers run them
    assert _may_run_harness(config("harness", workers=2, worker=True))


def doubled(workdir: Path, value: int) -> tuple[int, bool]:
    return value * 2, workdir.is_dir()


def raises(workdir: Path) -> None:
    print("said before failing")
    raise ValueError("planted in the child")


def dies(workdir: Path) -> None:
    os._exit(3)


ENVIRONMENT_SEEN = """
import os

def test_environment():
    assert os.environ.get("TORCHYARD_PLANTED") == "at collection"
    assert "TORCHYARD_UNSET" not in os.environ
    assert 1 == 2
"""


def test_whole_runs_beside_the_run_see_the_environment_of_collection(monkeypatch: pytest.MonkeyPatch) -> None:
    """A whole run started beside the run gets the environment the run had when `Beside` was made (at
    collection), not that of whichever test is running when it starts; and its failures are its own."""
    monkeypatch.setenv("TORCHYARD_PLANTED", "at collection")
    monkeypatch.setenv("TORCHYARD_UNSET", "seen")
    run = WholeRun((("test_seen.py", ENVIRONMENT_SEEN),), ("-p", "no:cacheprovider"), unset=("TORCHYARD_UNSET",))
    for forked in (True, False):
        beside = Beside([run, Job(doubled, (2,))], forked=forked)
        try:
            monkeypatch.setenv("TORCHYARD_PLANTED", "by a later test")
            assert beside.result(1) == (4, True)
            result = beside.result(0)
            assert result.ret == pytest.ExitCode.TESTS_FAILED
            result.stdout.fnmatch_lines(["*assert 1 == 2*"])  # failed where it was meant to, not before
        finally:
            beside.stop()
            monkeypatch.setenv("TORCHYARD_PLANTED", "at collection")


def test_work_beside_the_run_returns_its_values_and_its_failures_fail() -> None:
    """The tests that lower afresh trust `Beside`: a job that raises, or a child that dies, must fail the
    test that asks for it, never pass it or hang it."""
    beside = Beside([Job(doubled, (21,)), Job(raises), Job(doubled, (1,)), Job(dies), Job(doubled, (5,))])
    try:
        assert beside.result(2) == (2, True)  # in any order, each job in a folder of its own
        assert beside.result(0) == (42, True)
        with pytest.raises(pytest.fail.Exception, match=r"(?s)ValueError: planted in the child.*said before failing"):
            beside.result(1)
        for job in (3, 4):  # the child is gone: the job that killed it, and every job after it
            with pytest.raises(pytest.fail.Exception, match=rf"ended \(status 3\) before job {job}"):
                beside.result(job)
    finally:
        beside.stop()
    here = Beside([Job(doubled, (21,)), Job(raises)], forked=False)  # as in an xdist worker: done when asked
    try:
        assert here.result(0) == (42, True)
        with pytest.raises(pytest.fail.Exception, match="ValueError: planted in the child"):
            here.result(1)
    finally:
        here.stop()


def pte_loaded_both_ways(workdir: Path) -> list[list[float]]:
    """The MLP lowered to a .pte, run as `load_pte` loads it (the extension where this release has it as
    torchyard calls it, else `executorch.runtime`), as loaded by `executorch.runtime`, and in eager PyTorch."""
    from executorch.exir import to_edge_transform_and_lower

    case = BY_NAME["mlp"]
    module, (call, *_) = case.module(), case.calls()
    path = workdir / "mlp.pte"
    path.write_bytes(to_edge_transform_and_lower(torch.export.export(module, call.args)).to_executorch().buffer)
    with torch.no_grad():
        eager = module(*call.args)
    runs = [load(path)(list(call.args))[0] for load in (executorch.load_pte, executorch.load_pte_by_runtime)]
    return [output.flatten().tolist() for output in (*runs, eager)]


NO_EXECUTORCH = unavailable_reason("executorch-portable", CPU)


# Skipped, not started beside the run, where it cannot run.
@(pytest.mark.skip(reason=NO_EXECUTORCH) if NO_EXECUTORCH else pytest.mark.beside.with_args(pte_loaded_both_ways))
def test_a_pte_runs_alike_from_the_extension_and_from_executorch_runtime(beside: list[list[float]]) -> None:
    """Warm runs load a .pte from ExecuTorch's extension directly (its public wrapper imports the whole
    compiler), or through the wrapper where a release lays the extension out otherwise (executorch 1.2 has
    no `executorch.extension.pybindings._C`); either way the program runs to the wrapper's values."""
    by_extension, by_runtime, eager = beside
    assert by_extension == by_runtime
    assert torch.allclose(torch.tensor(by_extension), torch.tensor(eager), rtol=1e-4, atol=1e-5)


def frozen(workdir: Path) -> int:
    return gc.get_freeze_count()


@pytest.mark.beside.with_args(frozen)
def test_the_fork_servers_children_start_with_its_imports_frozen(beside: int) -> None:
    """torch's objects, imported once by the server, are out of the collector's sight in every child it forks
    (`server_last`): a full collection in a whole run walked them all again, 0.12 s each."""
    assert beside > 100_000, f"{beside} objects frozen"
