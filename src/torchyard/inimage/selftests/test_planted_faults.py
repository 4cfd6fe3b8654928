"""The comparison can fail: planted faults in a backend's outputs are caught, each metric at its bound; a
factory that builds other weights each call is caught before any comparison."""

from __future__ import annotations

import copy
import itertools
import math
from pathlib import Path

import pytest
import torch

from torchyard.inimage.cases import Call, Case
from torchyard.inimage.cases.builtin import Attention
from torchyard.inimage.evaluation.backends import BackendRun
from torchyard.inimage.evaluation.evaluations import _step_failed
from torchyard.inimage.evaluation.factory import factory_differs
from torchyard.inimage.evaluation.harness import REFERENCE_FAILED, evaluate, make_reference
from torchyard.inimage.evaluation.metrics import beyond_bounds, compare_values
from torchyard.inimage.evaluation.training import floors
from torchyard.inimage.evaluation.trees import Leaf, leaves
from torchyard.inimage.selftests.planted import BY_NAME, RUN_DEVICE, TOLERANCES, Switch, on_cpu, run_planted
from torchyard.inimage.start.probe import CPU
from torchyard.inimage.start.tolerances import Bounds, load_tolerances

pytestmark = pytest.mark.harness


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


class AllNaN(torch.nn.Module):
    """A bias gone NaN (a helper that divides zero by zero): every output element NaN, on every backend."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.linear(x) + float("nan")
        return out


def test_a_model_whose_output_is_nan_everywhere_fails_once_not_passes_everywhere(tmp_path: Path) -> None:
    """An outside repository's model made all NaN passed every backend (each computed the same NaN as eager's
    float64 reference): the reference holds nothing to compare, and the case fails once, saying so."""
    case = Case("all_nan", AllNaN, lambda g: (torch.randn(2, 4, generator=g),))
    result = evaluate(case, "eager", device=CPU, dtype=torch.float32, tolerances=TOLERANCES, workdir=tmp_path)
    assert result.status == "error"
    assert result.reason == (
        "reference: eager's output (the output) is NaN in every element: nothing a backend could be held to; check "
        "the model's weights and inputs"
    ), result.reason


class SparseBuffers(torch.nn.Module):
    """A CSR buffer forward reads and a COO buffer it never does (an outside repository's shapes)."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)
        self.register_buffer("csr", torch.eye(4).to_sparse_csr())
        self.register_buffer("coo", torch.eye(4).to_sparse())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        csr: torch.Tensor = self.get_buffer("csr")
        out: torch.Tensor = self.linear(x) @ csr.to_dense()
        return out


def test_sparse_buffers_are_the_models_not_a_fault_of_torchyards_checks(tmp_path: Path) -> None:
    """A CSR buffer failed torchyard's check that the factory builds new weights (`data_ptr` of a tensor with no
    storage), blamed on eager; a COO buffer crashed the train step's floors with a traceback."""
    case = Case("sparse_buffers", SparseBuffers, lambda g: (torch.randn(2, 4, generator=g),))
    eager = evaluate(case, "eager", device=CPU, dtype=torch.float32, tolerances=TOLERANCES, workdir=tmp_path)
    assert eager.status == "passed", eager.reason
    names = ["buffers[coo]", "buffers[csr]", "params[linear.weight]"]
    values: list[Leaf] = [torch.eye(4).to_sparse() * 2, torch.eye(4).to_sparse_csr(), torch.ones(4, 4)]
    assert floors(values, names)[0] == pytest.approx(0.02)


def test_a_float64_step_that_fails_in_torchyards_code_says_so() -> None:
    def torchyards_own() -> None:
        floors([torch.eye(2)], [])  # zip(strict=True) raises here, in training.py

    try:
        torchyards_own()
    except ValueError as error:
        why = _step_failed(error)
    assert why.startswith("reference: the float64 step failed in torchyard's code, not the model's: ValueError"), why
    assert "(at torchyard/inimage/evaluation/training.py:" in why, why


def test_non_finite_values_are_right_only_where_the_reference_has_them() -> None:
    """log(0) is -inf in float64 too: an infinity of the reference's sign, or NaN where it has NaN, is right,
    and the finite rest is measured as ever; a non-finite value anywhere else, or a finite one where the
    reference is not, fails."""
    inf, nan = math.inf, math.nan
    reference = torch.tensor([-inf, 1.0, nan, 2.0], dtype=torch.float64)
    bounds = TOLERANCES.bounds("float32", "export", {})

    def compared(*values: float) -> str:
        return compare_values(torch.tensor(values), reference, torch.float32, bounds, "").problem

    assert compared(-inf, 1.0, nan, 2.0) == ""
    assert compared(-inf, 1.1, nan, 2.0).startswith("scaled max error")  # the finite rest, measured
    assert compared(inf, 1.0, nan, 2.0) == "1 non-finite values (NaN or Inf)"  # the other sign
    assert compared(-inf, nan, nan, 2.0) == "1 non-finite values (NaN or Inf)"
    assert compared(-1e30, 1.0, 0.0, 2.0) == "2 finite values where the reference is NaN or Inf"


def test_a_conjugated_or_sparse_output_is_compared_by_its_values() -> None:
    """fft.ifft's output carries a lazy conjugation and to_sparse's a sparse layout: both are compared as the
    values they hold (each once killed the ops sweep's child)."""
    bounds = TOLERANCES.bounds("float32", "export", {})
    z = torch.randn(6, dtype=torch.complex64)
    assert compare_values(z.conj(), z.conj().resolve_conj().to(torch.complex128), torch.complex64, bounds, "").passed
    assert not compare_values(z.conj(), z.to(torch.complex128), torch.complex64, bounds, "").passed
    dense = torch.randn(3, 4)
    assert compare_values(dense.to_sparse(), dense.to(torch.float64), torch.float32, bounds, "").passed
    assert not compare_values((2 * dense).to_sparse(), dense.to(torch.float64), torch.float32, bounds, "").passed


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
    warm cache, where a first CPU compile would cost every process torch 2.11's check of the CPU's vector
    instructions, which starts Python ten times)."""
    case = Case(f"switch_{when}_{wrong}", lambda: Switch(when, wrong), lambda g: (torch.randn(4, 8, generator=g),))
    eager = evaluate(case, "eager", device=RUN_DEVICE, dtype=torch.float32, tolerances=TOLERANCES, workdir=tmp_path)
    assert eager.status == "passed", eager.reason
    result = evaluate(case, backend, device=RUN_DEVICE, dtype=torch.float32, tolerances=TOLERANCES, workdir=tmp_path)
    assert result.status == "failed" and problem in result.reason


def test_a_model_that_cannot_run_fails_once_with_the_reason(tmp_path: Path) -> None:
    class Broken(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            raise ValueError("the policy is broken")

    case = Case("broken", Broken, lambda g: (torch.randn(2, 2, generator=g),))
    result = evaluate(case, "inductor", device=CPU, dtype=torch.float32, tolerances=TOLERANCES, workdir=tmp_path)
    assert result.status == "error"
    assert result.reason.startswith("reference: eager on cpu fails: ValueError: the policy is broken")


class KeepsAStaticmethod(torch.nn.Module):
    """A model that keeps a `staticmethod` object on itself (as rotary-embedding-torch's xpos option does), which
    `copy.deepcopy` cannot copy."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)
        self.activation = staticmethod(torch.tanh)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.activation(self.linear(x))
        return out


def test_a_model_that_cannot_be_copied_is_used_as_built_and_a_shared_one_is_refused(tmp_path: Path) -> None:
    def inputs(g: torch.Generator) -> tuple[torch.Tensor]:
        return (torch.randn(2, 4, generator=g),)

    with pytest.raises(TypeError, match="staticmethod"):
        copy.deepcopy(KeepsAStaticmethod())  # the premise
    built = Case("keeps_a_staticmethod", KeepsAStaticmethod, inputs)
    for backend in ("eager", "export"):
        result = evaluate(built, backend, device=CPU, dtype=torch.float32, tolerances=TOLERANCES, workdir=tmp_path)
        assert result.status == "passed", result.reason
    shared = KeepsAStaticmethod()
    around = Case("wraps_one_model", lambda: torch.nn.Sequential(shared), inputs)  # new each call, same weights
    for case in (Case("hands_out_one_model", lambda: shared, inputs), around):
        result = evaluate(case, "eager", device=CPU, dtype=torch.float32, tolerances=TOLERANCES, workdir=tmp_path)
        assert result.status == "error" and result.reason.startswith(
            "reference: eager on cpu fails: TypeError: the case's factory returns the same model each call, or one "
            "holding the same weights, and it cannot be copied (copy.deepcopy: TypeError: cannot pickle "
            "'staticmethod' object): make the factory build a new model"
        ), result.reason


class Uninitialized(torch.nn.Module):
    """A positional embedding left as `torch.empty` made it, as a speech decoder's was: whatever the memory held
    (NaN at times), another each model."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)
        self.position = torch.nn.Parameter(torch.empty(2, 4))
        self.register_buffer("mask", torch.full((4,), float("nan")))  # NaN each time alike: deterministic

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.linear(x) + self.position
        return out


CALLS = itertools.count(1)


def uninitialized() -> Uninitialized:
    """What the memory held, planted: a count of the calls in the first element, so that no two models are
    alike whatever the allocator hands out (uninitialized memory, alike by chance, would only pass)."""
    model = Uninitialized()
    with torch.no_grad():
        model.position.nan_to_num_(0.0, 0.0, 0.0)[0, 0] = next(CALLS)
    return model


def initialized() -> Uninitialized:
    """The fix: every weight initialized (its NaN mask is still NaN, alike in each model)."""
    model = Uninitialized()
    with torch.no_grad():
        model.position.zero_()
    return model


def test_a_factory_that_builds_other_weights_each_call_is_named_not_the_backend(tmp_path: Path) -> None:
    """It failed eager against its own reference before ("relative L2 ..."): two models, two sets of weights."""

    def inputs(g: torch.Generator) -> tuple[torch.Tensor]:
        return (torch.randn(2, 4, generator=g),)

    case = Case("uninitialized", uninitialized, inputs)
    expected = (
        "case 'uninitialized': its factory builds different weights each call (parameter position differs "
        "between two models built under the same seed): make it deterministic"
    )
    for backend in ("eager", "export"):
        result = evaluate(case, backend, device=CPU, dtype=torch.float32, tolerances=TOLERANCES, workdir=tmp_path)
        assert result.status == "error" and result.reason.startswith(REFERENCE_FAILED + expected), result.reason
    assert factory_differs(case).startswith(expected)  # the train suite's check
    fixed = Case("initialized", initialized, inputs)  # a NaN in the same place in both models is alike
    assert factory_differs(fixed) == ""
    result = evaluate(fixed, "eager", device=CPU, dtype=torch.float32, tolerances=TOLERANCES, workdir=tmp_path)
    assert result.status == "passed", result.reason
