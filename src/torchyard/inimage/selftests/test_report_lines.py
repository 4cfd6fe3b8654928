"""What a run says reads at a glance: a pass that rests on a rule names it, a float64 reference that is the
run's precision in effect says so, model output types save, a failure names the stack's step and frame where
it failed (ExecuTorch's lowering, torch.export), and torch's noise (its structured trace under pytest, a
failing export's graph printed twice) is kept out of the output."""

from __future__ import annotations

import collections
import dataclasses
import logging
import re
from pathlib import Path
from typing import Any

import pytest
import torch

from torchyard.contract import RunOptions
from torchyard.inimage import report
from torchyard.inimage.cases import Call, Case
from torchyard.inimage.cases.builtin import CASES
from torchyard.inimage.evaluation import harness
from torchyard.inimage.evaluation.backends import Job, unavailable_reason
from torchyard.inimage.evaluation.backends.executorch import Delegate, ExecuTorch
from torchyard.inimage.evaluation.backends.inductor import graph_counts, graphs_since
from torchyard.inimage.evaluation.backends.running import export_program
from torchyard.inimage.evaluation.cache.artifacts import ArtifactCache
from torchyard.inimage.evaluation.evaluations import Evaluations
from torchyard.inimage.evaluation.harness import FLOAT64, Result, evaluate, failure_reason, make_reference
from torchyard.inimage.evaluation.metrics import Comparison, compare_values
from torchyard.inimage.evaluation.trees import NAMEDTUPLE_ROUTE
from torchyard.inimage.plugin.first_use import TORCH_TRACE
from torchyard.inimage.plugin.verdicts import pass_reason
from torchyard.inimage.start.probe import CPU
from torchyard.inimage.start.settings import RunSettings
from torchyard.inimage.start.tolerances import Bounds, load_tolerances
from torchyard.inimage.suites import test_runtime as runtime_suite
from torchyard.inimage.suites import test_train as train_suite
from torchyard.names import SHAPE_SUITES

pytestmark = pytest.mark.harness

FLOAT32 = Bounds(max_scaled_error=1e-4, max_rel_l2=1e-5, min_cosine=0.9999999)
MLP = next(case for case in CASES if case.name == "mlp")
NO_EXECUTORCH = unavailable_reason("executorch-portable", CPU)


def test_a_pass_of_a_suite_that_does_not_judge_values_says_so() -> None:
    """XNNPACK's tanh GELU ran and missed its values: the runtime suite passes it, saying by which rule."""
    missed = Result("gelu_tanh", "executorch-xnnpack", "float32", "failed", "scaled max error 0.000147 > 0.0001")
    missed.shapes_match = True
    assert pass_reason("runtime", missed, runtime_suite.RULE) == (
        "passes the runtime rule (the program loaded and ran with eager's output shapes); its values are the "
        "parity suite's to judge: scaled max error 0.000147 > 0.0001"
    )
    assert pass_reason("runtime", Result("mlp", "executorch-xnnpack", "float32", "passed"), runtime_suite.RULE) == ""
    # Every suite that judges shapes says so (issue 72: the aot suite's pass said nothing of where its values are
    # judged), and one that judges values never does.
    for suite in SHAPE_SUITES:
        assert pass_reason(suite, missed, "its rule").startswith(f"passes the {suite} rule (its rule); its values")
    assert not pass_reason("parity", missed, "its rule").startswith("passes the parity rule")


def test_a_leaf_that_passes_by_the_small_leaf_rule_is_named() -> None:
    """An AdamW step's leaf below its group's floor shows a rel L2 over the bound in the table: the pass says
    that the small-leaf rule judged it, and how."""
    reference = torch.full((8,), 1e-4, dtype=torch.float64)
    small = compare_values(reference.float() + 1.27e-7, reference, torch.float32, FLOAT32, "state[w]", floor=1e-2)
    plain = compare_values(torch.ones(4), torch.ones(4, dtype=torch.float64), torch.float32, FLOAT32, "loss")
    assert small.passed and small.rel_l2_error > FLOAT32.max_rel_l2 and plain.rule == ""
    assert small.rule.startswith("small-leaf rule: largest error 1.27e-07 is 1.27e-05 of its group's floor 0.01")
    step = Result("mlp", "train-inductor-adamw", "float32", "passed", comparisons=[plain, small])
    assert (
        pass_reason("train", step, train_suite.RULE)
        == f"passes, 1 of its outputs by a rule of their own: output state[w] by the {small.rule}"
    )


class CastsInside(torch.nn.Module):
    """As vector-quantize-pytorch's VectorQuantize: float32 inside `forward`, whatever it is given."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weight, bias = self.linear.weight.float(), self.linear.bias.float()
        return torch.nn.functional.linear(x.float(), weight, bias)


def test_a_float64_reference_that_is_float32_in_effect_says_so() -> None:
    case = Case("casts_inside", CastsInside, lambda g: (torch.randn(2, 8, generator=g),))
    reference = make_reference(case, case.calls(), device=CPU, dtype=torch.float32)
    assert reference.kind == f"{FLOAT64} (float32 in effect: eager in float32 equals it exactly)"
    assert make_reference(MLP, MLP.calls(), device=CPU, dtype=torch.float32).kind == FLOAT64


NARROWING = """
import torch


class Narrowing(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(8, 8)
        self.norm = torch.nn.LayerNorm(8)

    def forward(self, x):
        h = self.linear(x)
        return self.norm(h.float())
"""


def test_a_reference_that_is_not_float64_names_the_models_line_that_narrows_and_the_remedy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 58: a LayerNorm fed `x.float()` made the reference float32, and the report named torch's
    functional.py for it, neither the model's line nor what to do."""
    (tmp_path / "narrowing_model.py").write_text(NARROWING)
    monkeypatch.syspath_prepend(str(tmp_path))
    import narrowing_model  # type: ignore[import-not-found]

    case = Case("narrowing", narrowing_model.Narrowing, lambda g: (torch.randn(2, 8, generator=g),))
    kind = make_reference(case, case.calls(), device=CPU, dtype=torch.float32).kind
    assert kind.startswith("float32 on cpu (float64 fails: RuntimeError: mixed dtype")
    assert kind.endswith(
        "; it narrows at narrowing_model.py:13 in forward: `return self.norm(h.float())` (float): keep that "
        "computation in its input's dtype (`x.to(x.dtype)`, not `x.float()`) to be held to float64"
    )


def test_a_cases_reference_is_one_line_though_its_train_steps_say_it_without_the_narrowing_line() -> None:
    """Issue 58 (whisper's adoption): each case's float32 reference was said twice, the inference results' text
    with the line that narrows and the train steps' without it."""
    plain = "float32 on cpu (float64 fails: RuntimeError: mixed dtype)"
    located = f"{plain}; it narrows at model.py:41 in forward"
    records = [
        {"case": "decoder", "backend": "eager", "reference": located},
        {"case": "decoder", "backend": "train-eager-sgd", "reference": plain},
        {"case": "other", "backend": "train-eager-sgd", "reference": plain},
        {"case": "plain", "backend": "eager", "reference": "float64 on cpu"},
    ]
    assert report.notes(records, {}) == (f"- reference for `decoder`: {located}\n- reference for `other`: {plain}\n")


Heads = collections.namedtuple("Heads", ["action", "value"])


@dataclasses.dataclass
class Output:
    action: torch.Tensor


class NamedHeads(torch.nn.Module):
    def __init__(self, output: str) -> None:
        super().__init__()
        self.output = output
        self.linear = torch.nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> Heads | Output:
        y = self.linear(x)
        return Heads(y, y.sum()) if self.output == "namedtuple" else Output(y)


def test_a_processs_first_lowering_on_a_backend_is_marked_as_such(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 60, found under act: the first lowering a process does on a backend pays the stack's warm-up, so a
    run whose self-tests lowered first was 6x faster on the same case; the comparison holds like with like."""
    monkeypatch.setattr(harness, "_LOWERED", set())
    case = Case("tiny", lambda: torch.nn.Linear(4, 4), lambda g: (torch.randn(2, 4, generator=g),))
    first, second = (
        evaluate(case, "export", device=CPU, dtype=torch.float32, tolerances=load_tolerances(), workdir=tmp_path / n)
        for n in ("a", "b")
    )
    assert (first.first_lowering, second.first_lowering) == (True, False), (first.reason, second.reason)
    assert evaluate(
        case, "eager", device=CPU, dtype=torch.float32, tolerances=load_tolerances(), workdir=tmp_path / "c"
    ).first_lowering


@pytest.mark.parametrize("output", ["namedtuple", "dataclass"])
def test_named_tuple_and_dataclass_outputs_are_saved_and_loaded(output: str, tmp_path: Path) -> None:
    """torch.export.save (and ExecuTorch, from the same tree spec) refuse both unless registered with a
    serialized name ("Can't serialize TreeSpec of namedtuple class ..."): torchyard registers them."""
    case = Case(f"named_{output}", lambda: NamedHeads(output), lambda g: (torch.randn(2, 4, generator=g),))
    result = evaluate(case, "export", device=CPU, dtype=torch.float32, tolerances=load_tolerances(), workdir=tmp_path)
    assert result.status == "passed", result.reason


def test_torch_still_has_its_named_tuple_route() -> None:
    """torch has no public route to register a named tuple for saving: the private one torchyard uses is
    checked for the shape it relies on, and this fails when it moves (the save then fails with torch's own
    one line, naming the type)."""
    assert NAMEDTUPLE_ROUTE is not None


def test_pytests_log_handlers_are_kept_off_torchs_structured_trace() -> None:
    """Attached, they make torch build a trace record for every compile event and print each as an empty
    `DEBUG torch.__trace` line."""
    trace = logging.getLogger(TORCH_TRACE)
    assert not trace.propagate  # why pytest attaches to it at all
    assert not [handler for handler in trace.handlers if type(handler).__module__.startswith("_pytest.")]


class DataDependent(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + 1 if x.sum() > 0 else x - 1


def test_a_failing_export_prints_its_partial_graph_once(capsys: pytest.CaptureFixture[str]) -> None:
    case = Case("data_dependent", DataDependent, lambda g: (torch.randn(2, generator=g),))
    with pytest.raises(Exception, match="data-dependent"):
        export_program(case, DataDependent(), case.calls()[0])
    assert capsys.readouterr().err.count("def forward(") == 1


def test_a_step_with_many_leaves_out_of_bounds_names_the_worst_first_and_counts_the_rest() -> None:
    """A deep model's training step missed its bounds in 180 leaves, and the reason listed them all, in order,
    cut off mid-word in the summary: past three, the worst (by how far past its bound) come first."""
    bounds = Bounds(max_scaled_error=1e-4, max_rel_l2=1e-5, min_cosine=0.9999999)

    def leaf(name: str, rel_l2: float) -> Comparison:
        problem = f"relative L2 error {rel_l2:.3g} > 1e-05" if rel_l2 > 1e-5 else ""
        return Comparison(name, [4], "torch.float32", 0.0, 0.0, rel_l2, 1.0, problem)

    leaves = [leaf(f"grad[w{n}]", rel_l2) for n, rel_l2 in enumerate([2e-5, 1e-6, 9e-5, 3e-5, 5e-5, 1.1e-5])]
    assert failure_reason(leaves, bounds) == (
        "5 of 6 outputs out of bounds, the worst first: output grad[w2]: relative L2 error 9e-05 > 1e-05; "
        "output grad[w4]: relative L2 error 5e-05 > 1e-05; output grad[w3]: relative L2 error 3e-05 > 1e-05; "
        "and 2 more (parity.json has each)"
    )
    few = leaves[:3]  # three or fewer: each one, in the output's order
    assert failure_reason(few, bounds) == (
        "output grad[w0]: relative L2 error 2e-05 > 1e-05; output grad[w2]: relative L2 error 9e-05 > 1e-05"
    )


@dataclasses.dataclass(frozen=True)
class Refusing(Delegate):
    """A delegate whose partitioner fails inside ExecuTorch's lowering, as ExecuTorch's own passes do
    (1.5.1's `convert_constant_dim_order_pass` calls `.contiguous()` on a sparse constant)."""

    def partitioners(self) -> list[Any]:
        from executorch.exir.backend.partitioner import Partitioner

        class RefusingPartitioner(Partitioner):  # type: ignore[misc]
            def partition(self, exported_program: Any) -> Any:
                raise RuntimeError("the delegate refuses the program")

        return [RefusingPartitioner()]


class Branches(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y: torch.Tensor = self.linear(x)
        return y * 2 if y.sum() > 0 else y  # data-dependent: torch.export refuses to guard on it


class SparseTable(torch.nn.Module):
    """Keeps a sparse table its forward never reads: torch.export takes it, ExecuTorch 1.5.1's lowering does not."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)
        self.register_buffer("table", torch.eye(4).to_sparse())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y: torch.Tensor = self.linear(x)
        return y


def failures_by_stage(workdir: Path) -> dict[str, str]:
    """Each result's reason: a failure inside ExecuTorch's lowering, one at torch.export on the way there, and
    the sparse table on ExecuTorch's portable kernels."""

    def inputs(generator: torch.Generator) -> tuple[torch.Tensor]:
        return (torch.randn(2, 4, generator=generator),)

    refusing = ExecuTorch(Refusing("executorch-portable", None, frozenset({"cpu"})))

    def runner(case: Case, module: torch.nn.Module, calls: list[Call], device: torch.device, where: Path) -> Any:
        return refusing.run(Job(case, module, calls, device, where))

    def reason(case: Case, **given: Any) -> str:
        result = evaluate(
            case, "executorch-portable", device=CPU, dtype=torch.float32, tolerances=load_tolerances(),
            workdir=workdir / case.name, **given,
        )  # fmt: skip
        return result.reason

    return {
        "lowering": reason(MLP, runner=runner),
        "export": reason(Case("branches", Branches, inputs)),
        "sparse": reason(Case("sparse_table", SparseTable, inputs)),
    }


@(pytest.mark.skip(reason=NO_EXECUTORCH) if NO_EXECUTORCH else pytest.mark.beside.with_args(failures_by_stage))
def test_a_failure_inside_executorchs_lowering_is_executorchs(beside: dict[str, str]) -> None:
    """A failure past torch.export names ExecuTorch's step and its frame; one at the export names torch.export;
    neither reads as torchyard's or as the other's."""
    assert beside["lowering"].startswith(
        "RuntimeError: the delegate refuses the program (in ExecuTorch's to_edge_transform_and_lower, at "
        "executorch/exir/"
    ), beside["lowering"]
    assert "; raised at test_report_lines.py:" in beside["lowering"]  # the partitioner's own line, after ExecuTorch's
    assert "(in torch.export, at " in beside["export"], beside["export"]
    # Where this ExecuTorch fails on a sparse constant (1.5.1 does), it is its failure, at its pass; the key of
    # the sparse buffer is not.
    assert not beside["sparse"] or "(in ExecuTorch's to_edge_transform_and_lower, at executorch/" in beside["sparse"]
    assert "keys.py" not in beside["sparse"], beside["sparse"]


class Printing(torch.nn.Module):
    """A debug print left in forward, as LeRobot's guide warns: a graph break."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.linear(x)
        print("torchyard's planted debug print")
        return torch.relu(y)


@pytest.mark.harness("compile", "parity")
def test_a_graph_break_is_counted_and_named_and_fails_only_a_case_that_needs_one_graph(tmp_path: Path) -> None:
    """Issue 60: the compile suite compiled the whole graph or nothing, so a debug print failed the compiled
    path with `Unsupported` instead of being checked; a case that needs one graph (`fullgraph=True`) fails."""
    inputs = lambda g: (torch.randn(2, 8, generator=g),)  # noqa: E731
    bounds = load_tolerances()
    torch._dynamo.reset()
    broken = evaluate(
        Case("printing", Printing, inputs), "inductor", device=CPU, dtype=torch.float32, tolerances=bounds,
        workdir=tmp_path / "allowed",
    )  # fmt: skip
    assert broken.status == "passed", broken.reason  # what compiled is checked against float64 all the same
    assert broken.graph_breaks == 1 and broken.graphs == 2, (broken.graph_breaks, broken.graphs)
    assert broken.graph_break_reasons == ["Failed to trace builtin operator"], broken.graph_break_reasons
    torch._dynamo.reset()
    one_graph = evaluate(
        Case("printing", Printing, inputs, fullgraph=True), "inductor", device=CPU, dtype=torch.float32,
        tolerances=bounds, workdir=tmp_path / "fullgraph",
    )  # fmt: skip
    assert one_graph.status == "error" and "Failed to trace builtin operator" in one_graph.reason, one_graph.reason
    whole = {**broken.as_dict(), "case": "whole", "graphs": 1, "graph_breaks": 0, "graph_break_reasons": []}
    note = report.notes([broken.as_dict(), {**broken.as_dict(), "backend": "inductor"}, whole], {})
    assert note == "- graph breaks in `printing` (inductor): 1, 2 graphs: Failed to trace builtin operator\n"


@pytest.mark.harness("compile", "parity")
def test_an_entry_that_says_fullgraph_holds_each_case_to_one_graph(tmp_path: Path) -> None:
    """Issue 60: an entry (matrix.toml's `fullgraph = true`) holds every case to one graph, as a case's own
    `fullgraph=True` does: the debug print is a failure, not a count. Dynamo refuses before inductor compiles."""
    inputs = lambda g: (torch.randn(2, 8, generator=g),)  # noqa: E731
    made = RunSettings("cpu", "fp32", tmp_path, load_tolerances(), (), ("compile", "parity"), None, {})
    run = dataclasses.replace(made, options=RunOptions(fullgraph=True), artifacts=False)
    torch._dynamo.reset()
    result = Evaluations(run, tmp_path / "scratch").result(Case("printing", Printing, inputs), "inductor")
    assert result.status == "error" and "Failed to trace builtin operator" in result.reason, result.reason


@pytest.mark.harness("compile", "parity")
def test_a_recompilation_is_counted_with_the_guard_that_failed() -> None:
    """Issue 60: a frame compiled again (a batch of a new shape here) is dynamo's recompilation, counted from its
    compilation metrics with the guard that failed, and said in parity.md's notes; a call that reuses a graph
    adds none. Dynamo's own accounting, whatever the backend: `eager` keeps this test free of compiles."""
    torch._dynamo.reset()
    compiled = torch.compile(lambda x: x * 2, backend="eager")
    before = graph_counts()
    for rows in (2, 5, 7):  # the second shape fails the first graph's guard; dynamo then compiles it dynamic
        compiled(torch.randn(rows, 3))
    notes = graphs_since(before)
    assert (notes["graphs"], notes["recompiles"]) == (2, 1), notes
    guards = notes["recompile_reasons"]
    assert isinstance(guards, list) and len(guards) == 1, notes
    # the frame's number is the process's: other tests compiled before
    assert re.fullmatch(r"\d+/0: tensor 'x' size mismatch at index 0\. expected 2, actual 5", guards[0]), notes
    before = graph_counts()
    compiled(torch.randn(9, 3))
    assert graphs_since(before)["recompiles"] == 0
    # After a reset (localization does one) dynamo numbers frames from 0 again: the new compiles carry the
    # ids of the ones above, and are counted all the same (the review found them dropped).
    torch._dynamo.reset()
    again = torch.compile(lambda x: x * 3, backend="eager")
    before = graph_counts()
    for rows in (2, 5):
        again(torch.randn(rows, 3))
    assert graphs_since(before)["recompiles"] == 1
    record = {"case": "policy", "backend": "inductor", **notes}
    note = report.notes([record], {})
    assert note == f"- recompiled `policy` (inductor): 1 times: {guards[0]}\n", note


class SplitByCumsum(torch.nn.Module):
    """A cumsum XNNPACK does not take, between two linears it does: its one subgraph split in two."""

    def __init__(self) -> None:
        super().__init__()
        self.first, self.second = torch.nn.Linear(8, 8), torch.nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.second(torch.cumsum(self.first(x), dim=1))
        return out


@pytest.mark.harness("runtime", "parity")
@pytest.mark.skipif(bool(NO_EXECUTORCH), reason=NO_EXECUTORCH or "")
def test_a_delegates_share_of_the_program_is_recorded_and_what_it_left_out_named(tmp_path: Path) -> None:
    """Issue 60: an operator XNNPACK does not take splits a model's delegated subgraph and moves nodes to
    portable kernels; the model still passes. ExecuTorch's own accounting says so, kept with the program, so
    a program from the artifact cache says it too."""
    inputs = lambda g: (torch.randn(2, 8, generator=g),)  # noqa: E731
    cache = ArtifactCache(tmp_path / "artifacts")

    def lowered(case: Case) -> Result:
        return evaluate(
            case, "executorch-xnnpack", device=CPU, dtype=torch.float32, tolerances=load_tolerances(),
            workdir=tmp_path / case.name, cache=cache,
        )  # fmt: skip

    split, again = lowered(Case("split", SplitByCumsum, inputs)), lowered(Case("split", SplitByCumsum, inputs))
    assert split.status == "passed" and again.cache == "hit", (split.reason, again.cache)
    assert split.delegation == again.delegation and split.delegation is not None
    assert split.delegation["subgraphs"] == 2 and split.delegation["left-out"] == ["aten_cumsum_default"]
    whole = {**split.as_dict(), "case": "whole", "delegation": {**split.delegation, "left-out": []}}
    assert report.notes([split.as_dict(), whole], {}) == (
        "- delegation of `split` (executorch-xnnpack): 2 subgraphs, "
        f"{split.delegation['delegated-nodes']} of "
        f"{split.delegation['delegated-nodes'] + split.delegation['non-delegated-nodes']} nodes delegated; "
        "left to portable kernels: aten_cumsum_default\n"
    )


def test_a_compile_counts_what_the_compilers_own_caches_served(tmp_path: Path) -> None:
    """Issue 58: a result evaluated again (after a change elsewhere) compiles from inductor's and AOTAutograd's
    own caches; the run says how often they served, counting results it evaluated, not replayed ones."""
    torch._dynamo.reset()  # dynamo's in-memory code cache empty, as a new process: this evaluation compiles
    compiled = evaluate(
        MLP, "inductor", device=CPU, dtype=torch.float32, tolerances=load_tolerances(), workdir=tmp_path
    )
    counts = compiled.compiler_caches  # a hit or a miss, as this process's inductor cache stands: one compile each
    assert compiled.status == "passed" and counts.get("fxgraph_cache_hit", 0) + counts.get("fxgraph_cache_miss", 0)
    served = {"fxgraph_cache_hit": 3, "fxgraph_cache_miss": 1, "autograd_cache_hit": 2}
    records = [
        {**compiled.as_dict(), "compiler_caches": served},
        {**compiled.as_dict(), "compiler_caches": {"fxgraph_cache_miss": 9}, "replayed": "2026-12-01T00:00:00+00:00"},
    ]
    assert report.compiler_caches_line(records) == (
        "**Compiler caches**: inductor's compiled graphs 3 of 4 hit, AOTAutograd's 2 of 2 hit.\n\n"
    )
    assert report.compiler_caches_line([{**compiled.as_dict(), "compiler_caches": {}}]) == ""
