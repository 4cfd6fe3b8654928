"""Self-tests of the ops suite: a planted wrong value in one backend's lowering of one operator fails that
operator's test and names it, a stale expectation fails, and a crashing operator is an outcome, not the end of
the run. Operators of their own (`torch.add`, `torch.mul`) on eager and export: no op_db, no compiler."""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from torchyard.inimage.cases import Call, Case
from torchyard.inimage.evaluation.backends import NO_CACHE, BackendRun, Runner, runner_for
from torchyard.inimage.ops import expectations
from torchyard.inimage.ops.catalog import Operator, Sample, chosen_samples, sample_set_aside
from torchyard.inimage.ops.options import OpsOptions
from torchyard.inimage.ops.outcomes import Outcome
from torchyard.inimage.ops.session import OpsSession
from torchyard.inimage.ops.sweep import Plant
from torchyard.inimage.start.probe import CPU
from torchyard.inimage.start.tolerances import load_tolerances

pytestmark = pytest.mark.harness("ops")  # the ops suite's own machinery: runs where the run has that suite
BACKENDS = ("eager", "export")
IDENTITY = {"accelerator": "cpu", "precision": "fp32", "torch": "planted"}


# Module-level and bound with functools.partial, never closures: on a machine whose run has used a GPU the
# sweep goes through its host process (`ops.sweep_host`), which takes the operators and plants pickled.
def _samples_of(
    shape: tuple[int, ...], kwargs: dict[str, Any], device: torch.device, dtype: torch.dtype
) -> list[Sample]:
    made = [torch.randn(*shape, device=device, dtype=dtype) for _ in range(4)]
    return [Sample(made[0], (made[1],)), Sample(made[2], (made[3],), kwargs)]


def _two_samples(shape: tuple[int, ...], **kwargs: Any) -> Any:
    return functools.partial(_samples_of, shape, kwargs)


def _planted_at(where: tuple[str, str], runner: Runner, case: str, backend: str) -> Runner | None:
    return runner if (case, backend) == where else None


def _these(operators: list[Operator]) -> Callable[[], list[Operator]]:
    return functools.partial(list, operators)


OPERATORS = [
    Operator("planted.add", torch.add, _two_samples((3, 4), alpha=2), base="planted.add"),
    Operator("planted.mul", torch.mul, _two_samples((2, 5)), base="planted.mul"),
    Operator("planted.random", torch.bernoulli, _two_samples((2,)), "random: its values are drawn at random"),
]


def _session(tmp_path: Path, *, collect: bool, plant: Plant | None = None, host: bool | None = None) -> OpsSession:
    return OpsSession(
        OpsOptions("planted.add,planted.mul,planted.random", 2, tmp_path / "expected.toml", collect),
        device=CPU,
        dtype=torch.float32,
        identity=IDENTITY,
        tolerances=load_tolerances(),
        backends=BACKENDS,
        report_dir=tmp_path / "reports",
        workdir=tmp_path / "work",
        operators=_these(OPERATORS),
        plant=plant,
        cache=NO_CACHE,
        timeout_s=120,
        host=host,
    )


def _collected(tmp_path: Path) -> Path:
    collecting = _session(tmp_path, collect=True)
    for name in collecting.names():
        collecting.run(name)
    collecting.finish()
    return collecting.path


class _Perturbed(torch.nn.Module):
    """The operator's module, a thousandth off: what a wrong lowering of it computes."""

    def __init__(self, inner: torch.nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        return self.inner(*inputs) * 1.001  # type: ignore[no-any-return]


def _planted_wrong(
    case: Case, module: torch.nn.Module, calls: list[Call], device: torch.device, workdir: Path
) -> BackendRun:
    return runner_for("export")(case, _Perturbed(module), calls, device, workdir)


def _planted_abort(
    case: Case, module: torch.nn.Module, calls: list[Call], device: torch.device, workdir: Path
) -> BackendRun:
    print("planted: tensor_impl.h:136 Dimension out of range", file=sys.stderr, flush=True)
    os.abort()


def test_a_planted_wrong_value_fails_and_names_the_operator(tmp_path: Path) -> None:
    _collected(tmp_path)
    planted = _session(
        tmp_path,
        collect=False,
        plant=functools.partial(_planted_at, ("op-planted.add-0", "export"), _planted_wrong),
    )
    differences, _ = planted.run("planted.add")
    assert len(differences) == 1, differences
    # held to the noise rule's bound (eight times the sample's own float32 error), far under the table's 1e-4
    said = re.match(
        r"planted\.add sample 0 on export: wrong value: output: scaled max error 0\.001 > ([0-9.e-]+);", differences[0]
    )
    assert said and float(said[1]) < 1e-5, differences
    assert differences[0].endswith("expected passed")
    assert planted.run("planted.mul") == ([], "")


def test_a_stale_expectation_fails(tmp_path: Path) -> None:
    path = _collected(tmp_path)
    text = path.read_text(encoding="utf-8")
    assert "[outcomes." not in text and '"planted.random" = "random' in text  # all pass; one set aside
    path.write_text(
        text.replace('"planted.random" = ', '"planted.mul" = "random: stale"\n"planted.random" = ')
        + '\n[outcomes."planted.add#1"]\n"export" = { outcome = "failed to lower", detail = "stale" }\n',
        encoding="utf-8",
    )
    stale = _session(tmp_path, collect=False)
    assert stale.run("planted.add")[0] == [
        "planted.add sample 1 on export: passed: a known failure no longer fails, remove it (--collect-expectations); "
        "expected failed to lower"
    ]
    assert stale.run("planted.mul")[0] == ["planted.mul: set aside by rule '', expected 'random: stale'"]
    assert stale.run("planted.random") == ([], "random: its values are drawn at random")


@pytest.mark.parametrize("host", [False, True], ids=["forked from the run", "through the host"])
def test_a_crashing_operator_is_its_outcome_not_the_end(tmp_path: Path, host: bool) -> None:
    """Either way a sweep's children are made: forked from the run's process (a CPU run), or from the host
    process that never touched a GPU (`ops.sweep_host`: where the run has used one)."""
    aborting = _session(
        tmp_path, collect=False, plant=functools.partial(_planted_at, ("op-planted.add-0", "export"), _planted_abort),
        host=host,
    )  # fmt: skip
    differences, _ = aborting.run("planted.add")
    assert differences == [
        "planted.add sample 0 on export: crashed: SIGABRT: planted: tensor_impl.h:136 Dimension out of range; "
        "expected passed"
    ]
    assert [(o.sample, o.backend, o.outcome) for o in aborting.outcomes] == [
        (0, "eager", "passed"), (0, "export", "crashed"), (1, "eager", "passed"), (1, "export", "passed"),
    ]  # fmt: skip
    assert aborting.run("planted.mul") == ([], "")  # the run goes on
    _, markdown = aborting.finish()
    assert "| planted.add | 0 | export | crashed | SIGABRT: planted" in markdown.read_text(encoding="utf-8")


def test_collected_expectations_read_back_as_written(tmp_path: Path) -> None:
    outcomes = [
        Outcome("narrow", 1, "executorch-portable", "crashed", 'SIGABRT: "quoted" \\ back'),
        Outcome("narrow", 1, "export", "passed"),
        Outcome("gelu", 0, "executorch-xnnpack", "wrong value", "scaled max error 1.7e-4 > 1e-4"),
    ]
    path = tmp_path / "x.toml"
    aside = {"bernoulli": "random", "gelu#2": "random: dropout"}
    path.write_text(expectations.render(IDENTITY, aside, expectations.rows(outcomes)))
    loaded = expectations.load(path)
    assert loaded.stack == IDENTITY
    assert loaded.set_aside == {"bernoulli": "random", "gelu#2": "random: dropout"}
    assert loaded.outcomes == {
        ("narrow#1", "executorch-portable"): ("crashed", 'SIGABRT: "quoted" \\ back'),
        ("gelu#0", "executorch-xnnpack"): ("wrong value", "scaled max error 1.7e-4 > 1e-4"),
    }
    assert expectations.file_name(
        {"accelerator": "cpu", "precision": "fp32", "torch": "2.14.1", "executorch": "1.5.1"}
    ) == ("cpu-fp32-torch2.14.1-executorch1.5.1.toml")


def test_dropout_in_training_and_sparse_inputs_are_set_aside_by_rule() -> None:
    dropout = Operator("nn.functional.dropout", torch.nn.functional.dropout, _two_samples(()))
    attention = Operator("sdpa", torch.nn.functional.scaled_dot_product_attention, _two_samples(()))
    x = torch.ones(2, 2)
    assert sample_set_aside(dropout, Sample(x)) == "random: dropout in training mode"  # p=0.5, training by default
    assert sample_set_aside(dropout, Sample(x, (0.5, False))) == ""  # by position
    assert sample_set_aside(dropout, Sample(x, (), {"p": 0.0})) == ""
    assert sample_set_aside(attention, Sample(x, (x, x), {"dropout_p": 0.5})) == "random: dropout in training mode"
    assert sample_set_aside(attention, Sample(x, (x, x))) == ""
    assert sample_set_aside(OPERATORS[0], Sample(x.to_sparse(), (x,))).startswith("sparse:")
    samples = [Sample(x), Sample(x, (), {"training": False}), Sample(x), Sample(x, (0.0,))]
    kept = chosen_samples(Operator("dropout", F.dropout, lambda device, dtype: samples), CPU, torch.float32, 2)
    assert [(index, sample if isinstance(sample, str) else "runs") for index, sample in kept] == [
        (0, "random: dropout in training mode"), (1, "runs"), (2, "random: dropout in training mode"), (3, "runs"),
    ]  # fmt: skip


@pytest.mark.parametrize("count", [1, 2, 3, 5])
def test_the_shards_of_a_sweep_run_each_operator_once(count: int) -> None:
    names = tuple(f"op{index}" for index in range(7))
    shards = [OpsOptions("all", 2, None, False, (index, count)).sharded(names) for index in range(1, count + 1)]
    assert sorted(name for shard in shards for name in shard) == sorted(names)
    assert all(shards) and max(map(len, shards)) - min(map(len, shards)) <= 1  # even slices


def test_a_sweep_after_parallel_work_in_the_run_still_ends(tmp_path: Path) -> None:
    """A suite before the ops suite leaves OpenMP's threads in the run's process; a forked child has none of them,
    and its first parallel region (an add of 160,000 elements) waited for them forever."""
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        big = torch.randn(512, 512)
        (big @ big + big).sum()  # OpenMP's team of this process, started
        session = OpsSession(
            OpsOptions("planted.big", 1, tmp_path / "expected.toml", collect=False),
            device=CPU, dtype=torch.float32, identity=IDENTITY, tolerances=load_tolerances(), backends=("eager",),
            report_dir=tmp_path / "reports", workdir=tmp_path / "work",
            operators=_these([Operator("planted.big", torch.add, _two_samples((400, 400)), base="planted.big")]),
            cache=NO_CACHE, timeout_s=30,
        )  # fmt: skip
        assert session.run("planted.big") == ([], "")
        assert [(o.sample, o.outcome) for o in session.outcomes] == [(0, "passed")]
    finally:
        torch.set_num_threads(threads)


def test_a_sweep_after_inductor_compiled_in_the_run_still_compiles(tmp_path: Path) -> None:
    """The compile suite leaves inductor's compile thread pool in the run's process; a forked child has none of
    its threads, and its first compile waited on that pool forever (every inductor sample of the sweep, stalled)."""
    import torch._inductor.config as inductor_config  # here: importing it makes inductor's cache folder

    with inductor_config.patch(compile_threads=2):  # a pool even where the machine has one core
        torch.compile(lambda x: x.sin() * 2, backend="inductor", fullgraph=True)(torch.randn(8, 8))  # pool, started
        session = OpsSession(
            OpsOptions("planted.add", 1, tmp_path / "expected.toml", collect=False),
            device=CPU, dtype=torch.float32, identity=IDENTITY, tolerances=load_tolerances(),
            backends=("inductor",), report_dir=tmp_path / "reports", workdir=tmp_path / "work",
            operators=_these(OPERATORS[:1]), cache=NO_CACHE, timeout_s=60,
        )  # fmt: skip
        assert session.run("planted.add") == ([], "")
    assert [(o.sample, o.outcome) for o in session.outcomes] == [(0, "passed")]


def _none_between(x: torch.Tensor, nothing: None, y: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    assert nothing is None and dim is None
    return x + y


def _none_samples(device: torch.device, dtype: torch.dtype) -> list[Sample]:
    x, y = torch.randn(3, 4, device=device, dtype=dtype), torch.randn(3, 4, device=device, dtype=dtype)
    return [Sample(x, (None, y), {"dim": None})]


def test_a_none_argument_is_a_constant_not_an_input(tmp_path: Path) -> None:
    """`dim=None` (masked ops, interpolate, diff) is a constant of the sample's module: it took a tensor's
    place, so the module ran out of inputs (StopIteration) and 60 samples of the full sweep did not run."""

    session = OpsSession(
        OpsOptions("planted.none", 1, tmp_path / "expected.toml", collect=False),
        device=CPU, dtype=torch.float32, identity=IDENTITY, tolerances=load_tolerances(), backends=BACKENDS,
        report_dir=tmp_path / "reports", workdir=tmp_path / "work",
        operators=_these([Operator("planted.none", _none_between, _none_samples, base="planted.none")]),
        cache=NO_CACHE, timeout_s=60,
    )  # fmt: skip
    assert session.run("planted.none") == ([], "")
    assert [(o.backend, o.outcome) for o in session.outcomes] == [("eager", "passed"), ("export", "passed")]


def test_a_session_left_unfinished_does_not_hold_the_run_at_its_exit(tmp_path: Path) -> None:
    """A test that fails before its session's `finish` leaves the host running; the interpreter still exits
    (multiprocessing waits for every child that is not a daemon, and a host cannot be one)."""
    code = (
        "import pathlib, sys; from torchyard.inimage.selftests.test_ops_harness import _session; "
        f"session = _session(pathlib.Path({str(tmp_path)!r}), collect=False, host=True); "
        "print(session.run('planted.mul'), flush=True)"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    ended = subprocess.run(
        [sys.executable, "-c", code], check=False, env=env, capture_output=True, text=True, timeout=300
    )
    assert ended.returncode == 0 and "([], '')" in ended.stdout, ended.stdout + ended.stderr[-2000:]


def _swept_in_a_host(workdir: Path) -> tuple[list[tuple[str, int, str, str]], bool]:
    """`abs` from op_db swept as the host sweeps it, in a process as clean as the host (beside the run): its
    outcomes, and whether the process imported torch's OpInfo database (which initialises CUDA on a GPU)."""
    from torchyard.inimage.ops.sweep import SweepSettings
    from torchyard.inimage.ops.sweep_host import _swept

    settings = SweepSettings(CPU, torch.float32, load_tolerances(), workdir, timeout_s=120)
    swept = _swept("abs", ["eager", "export"], settings, 2, None, None)
    outcomes = [(o.operator, o.sample, o.backend, str(o.outcome)) for one in swept for o in one.outcomes]
    return outcomes, "torch.testing._internal.common_cuda" in sys.modules


# torch's OpInfo database imports numpy and expecttest, which torch does not depend on (an adopter's entry that
# does not run the ops suite has neither).
NO_OP_DB = [name for name in ("numpy", "expecttest") if importlib.util.find_spec(name) is None]


@(
    pytest.mark.skip(reason=f"torch's OpInfo database needs {' and '.join(NO_OP_DB)}, which this environment lacks")
    if NO_OP_DB
    else pytest.mark.beside.with_args(_swept_in_a_host)
)
def test_the_host_draws_op_db_samples_only_in_its_children(beside: tuple[list[Any], bool]) -> None:
    """On a machine with a GPU, the process that forks the sweep's children must never have initialised CUDA:
    op_db's import would (`ops.sweep_host`), so the children import it, and draw the samples the run would."""
    outcomes, imported = beside
    assert not imported
    assert outcomes == [("abs", 0, "eager", "passed"), ("abs", 0, "export", "passed")]


def test_a_shard_that_collects_writes_its_outcomes_and_no_file(tmp_path: Path) -> None:
    """A shard has a slice of the operators: its outcomes go to its ops.json, which `torchyard report
    --ops-expectations` puts together with the other shards'; it writes no expectations file of its own."""
    options = OpsOptions("planted.add,planted.mul", 2, tmp_path / "expected.toml", collect=True, shard=(2, 2))
    session = OpsSession(
        options, device=CPU, dtype=torch.float32, identity=IDENTITY, tolerances=load_tolerances(), backends=BACKENDS,
        report_dir=tmp_path / "reports", workdir=tmp_path / "work", operators=_these(OPERATORS),
        cache=NO_CACHE, timeout_s=120,
    )  # fmt: skip
    for name in options.sharded(session.names()):
        session.run(name)
    written = session.finish()
    assert not (tmp_path / "expected.toml").exists() and len(written) == 2
    data = json.loads((tmp_path / "reports" / "ops.json").read_text())
    assert data["shard"] == [2, 2] and {item["operator"] for item in data["outcomes"]} == {"planted.mul"}
