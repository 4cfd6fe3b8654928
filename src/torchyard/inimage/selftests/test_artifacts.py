"""The artifact cache can fail safely: a hit is still compared, a corrupt or half-written entry is never
used, concurrent writers leave one whole entry, and a change to what decides a program changes its key."""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import sys
import threading
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest
import torch

from torchyard import contract
from torchyard.inimage.cases import Case, KnownFailure
from torchyard.inimage.cases.builtin import CASES
from torchyard.inimage.evaluation.backends import Runner, runner_for, tensorrt, unavailable_reason
from torchyard.inimage.evaluation.backends.running import lowering_key
from torchyard.inimage.evaluation.cache import keys
from torchyard.inimage.evaluation.cache.artifacts import ArtifactCache, file_digest
from torchyard.inimage.evaluation.cache.digests import tensor_digest
from torchyard.inimage.evaluation.cache.keys import artifact_key
from torchyard.inimage.evaluation.errors import RecordedFailure
from torchyard.inimage.evaluation.harness import Result, evaluate
from torchyard.inimage.evaluation.trees import to_device
from torchyard.inimage.start.probe import CPU, torch_device
from torchyard.inimage.start.tolerances import load_tolerances
from torchyard.names import LOWERING_SUITES

pytestmark = pytest.mark.harness(*LOWERING_SUITES)  # the artifact cache: only lowered programs are kept

# The run's own device (the probe has checked it is there): a GPU run shows that a hit of a program lowered
# for its device is still compared.
DEVICE = torch_device(os.environ.get(contract.ACCELERATOR, "cpu"))
MLP = next(case for case in CASES if case.name == "mlp")
BACKENDS = ["export", "executorch-portable"]


def run(
    case: Case,
    backend: str,
    cache: ArtifactCache,
    workdir: Path,
    device: torch.device = CPU,
    *,
    runner: Runner | None = None,
) -> Result:
    return evaluate(
        case,
        backend,
        device=device,
        dtype=torch.float32,
        tolerances=load_tolerances(),
        workdir=workdir,
        runner=runner,
        cache=cache,
    )


# The tests that lower afresh do their lowering beside the suites (`beside.Beside`), in a child forked at
# collection, on a core the suites leave idle; the tests themselves judge what it returns, at the end of the
# run. A fresh lowering is the one thing a warm run would otherwise never do: its imports (ExecuTorch's
# compiler, torch.export's tracer) would be a large part of a warm run.
def beside_unless_missing(backend: str) -> Any:
    reason = unavailable_reason(backend, CPU)
    marks = pytest.mark.skip(reason=reason) if reason else pytest.mark.beside.with_args(miss_then_hit, backend)
    return pytest.param(backend, marks=marks)


def miss_then_hit(workdir: Path, backend: str) -> list[Result]:
    """The MLP lowered into an empty cache, then again."""
    cache = ArtifactCache(workdir / "cache")
    return [run(MLP, backend, cache, workdir / name) for name in ("first", "second")]


@pytest.mark.parametrize("backend", [beside_unless_missing(name) for name in BACKENDS])
def test_a_miss_stores_and_a_hit_loads_the_same_program(backend: str, beside: list[Result]) -> None:
    first, second = beside
    assert (first.cache, first.status) == ("miss", "passed"), first.reason
    assert (second.cache, second.status) == ("hit", "passed"), second.reason
    assert first.artifact and second.artifact
    assert file_digest(Path(first.artifact)) == file_digest(Path(second.artifact))  # the run's own copy


def plant_wrong_mlp(
    cache: ArtifactCache, backend: str, suffix: str, workdir: Path, *, options: dict[str, Any], device: torch.device
) -> None:
    """An MLP with its weights off by 1%, exported for `device`, stored under the right MLP's key for
    `backend` (with its `options`)."""
    call = to_device(MLP.calls()[0], device, torch.float32)
    key = lowering_key(MLP, backend, MLP.module().to(device), call, device, options=options).digest
    assert key is not None
    poisoned = MLP.module().to(device)
    with torch.no_grad():
        for parameter in poisoned.parameters():
            parameter.mul_(1.01)
    wrong = workdir / f"wrong{suffix}"
    torch.export.save(torch.export.export(poisoned, call.args), wrong)
    cache.store(key, suffix, wrong, {})


def wrong_program_under_the_right_key(workdir: Path, device_name: str) -> Result:
    device = torch.device(device_name)
    cache = ArtifactCache(workdir / "cache")
    plant_wrong_mlp(cache, "export", ".pt2", workdir, options={}, device=device)
    return run(MLP, "export", cache, workdir / "run", device)


@pytest.mark.beside.with_args(wrong_program_under_the_right_key, str(DEVICE))
def test_a_wrong_program_under_the_right_key_is_still_caught(beside: Result) -> None:
    """A cache must never hide a wrong value: a hit is run and compared like a fresh program, on the run's
    device."""
    assert beside.cache == "hit", beside.reason
    assert beside.status == "failed" and "relative L2 error" in beside.reason


def corrupt_entry(workdir: Path) -> list[Result]:
    """A miss; the stored program corrupted; the run after; the run after that."""
    cache = ArtifactCache(workdir / "cache")
    results = [run(MLP, "export", cache, workdir / "first")]
    (stored,) = (workdir / "cache").glob("*.pt2")
    stored.write_bytes(stored.read_bytes()[:-64] + b"\0" * 64)  # a disk error, or a writer killed mid-file
    return results + [run(MLP, "export", cache, workdir / name) for name in ("second", "third")]


@pytest.mark.beside.with_args(corrupt_entry)
def test_a_corrupt_entry_is_rebuilt(beside: list[Result]) -> None:
    first, second, third = beside
    assert first.cache == "miss"
    assert (second.cache, second.status) == ("rebuilt", "passed"), second.reason
    assert third.cache == "hit"


def test_a_sidecar_that_is_not_json_is_a_corrupt_entry(tmp_path: Path) -> None:
    cache = ArtifactCache(tmp_path / "cache")
    (tmp_path / "a.bin").write_bytes(b"program")
    cache.store("k" * 64, ".pt2", tmp_path / "a.bin", {})
    (tmp_path / "cache" / f"{'k' * 64}.json").write_text("{not json")
    assert cache.lookup("k" * 64, ".pt2", tmp_path / "copy.pt2") is None
    assert not list((tmp_path / "cache").iterdir()) and not (tmp_path / "copy.pt2").exists()


READS_PER_READER = 25  # hits each reader must see while the writers are writing
# A bounded count, not a deadline: a reader that cannot get its hits fails the test. A reader that meets a
# replaced entry deletes it, so with many cores racing, hits come rarer (135 of 200 in 100,000 tries on the
# 16-core GPU machine, docs/runs.md).
MOST_TRIES = 1_000_000


def test_concurrent_writers_leave_one_whole_entry(tmp_path: Path) -> None:
    """Writers of one key race while readers read it; every hit is one writer's whole program with that
    writer's own sidecar, never a mix. The writers write until every reader has had its hits, so each hit
    is read while writes are going on."""
    cache = ArtifactCache(tmp_path / "cache")
    programs = {}
    for writer in range(8):
        source = tmp_path / f"program-{writer}.bin"
        source.write_bytes(bytes([writer]) * 200_000)
        programs[source.name] = source
    key, start, readers_done = "c" * 64, threading.Barrier(16), threading.Event()
    cache.store(key, ".pte", programs["program-0.bin"], {"writer": "program-0.bin"})  # hits from the first read
    seen: list[bool] = []
    writes: list[int] = []

    def write(source: Path) -> None:
        start.wait()
        count = 0
        while not readers_done.is_set():
            cache.store(key, ".pte", source, {"writer": source.name})
            count += 1
        writes.append(count)

    def read(reader: int) -> None:
        start.wait()
        copy, hits = tmp_path / f"copy-{reader}.pte", 0
        for _ in range(MOST_TRIES):
            meta = cache.lookup(key, ".pte", copy)
            if meta is not None:
                seen.append(copy.read_bytes() == programs[meta["writer"]].read_bytes())
                hits += 1
                if hits == READS_PER_READER:
                    return

    writers = [threading.Thread(target=write, args=(source,)) for source in programs.values()]
    readers = [threading.Thread(target=read, args=(reader,)) for reader in range(8)]
    for thread in [*writers, *readers]:
        thread.start()
    for thread in readers:
        thread.join()
    readers_done.set()
    for thread in writers:
        thread.join()
    assert len(seen) == 8 * READS_PER_READER, f"the readers had {len(seen)} hits in {MOST_TRIES} tries each"
    assert all(seen), f"{seen.count(False)} of {len(seen)} hits mixed one writer's program with another's sidecar"
    assert len(writes) == 8 and all(writes)
    cache.store(key, ".pte", programs["program-0.bin"], {})
    assert cache.lookup(key, ".pte", tmp_path / "final.pte") is not None
    assert (tmp_path / "final.pte").read_bytes() == programs["program-0.bin"].read_bytes()
    assert not [path for path in (tmp_path / "cache").iterdir() if path.name.startswith(".")]  # no temp left


class VerifierError(RuntimeError):
    """Stands for a lowering's own error (ExecuTorch's SpecViolationError, say)."""


KNOWN = KnownFailure("the verifier rejects it (upstream 1.0)", raises="VerifierError", match=r"rejects node \d+")
OTHER = KnownFailure("another bug", raises="VerifierError", match="something else")


def materialize(cache: ArtifactCache, target: Path, calls: list[int], known: KnownFailure | None) -> None:
    """Lower under one key with a lowering that always fails with `VerifierError`, counting the lowerings."""

    def build(path: Path) -> dict[str, object]:
        calls.append(1)
        raise VerifierError("rejects node 7")

    cache.materialize("f" * 64, ".pte", target, build, known=known)


def test_a_known_lowering_failure_is_recorded_and_raised_again(tmp_path: Path) -> None:
    cache, calls = ArtifactCache(tmp_path / "cache"), list[int]()
    with pytest.raises(VerifierError):
        materialize(cache, tmp_path / "first.pte", calls, KNOWN)
    with pytest.raises(RecordedFailure) as recorded:
        materialize(cache, tmp_path / "second.pte", calls, KNOWN)
    assert len(calls) == 1  # the second run did not lower again
    assert recorded.value.types[:2] == ["VerifierError", "RuntimeError"]
    assert recorded.value.message == "rejects node 7" and KNOWN.matches(recorded.value.types, recorded.value.message)
    assert [path.suffix for path in (tmp_path / "cache").iterdir()] == [".json"]  # a record, no artifact


def test_only_a_declared_known_failure_is_recorded_and_used(tmp_path: Path) -> None:
    cache, calls = ArtifactCache(tmp_path / "cache"), list[int]()
    for known in (None, OTHER):  # no declaration, or one the error does not match: nothing is recorded
        with pytest.raises(VerifierError):
            materialize(cache, tmp_path / "run.pte", calls, known)
    assert not (tmp_path / "cache").exists()
    with pytest.raises(VerifierError):
        materialize(cache, tmp_path / "run.pte", calls, KNOWN)  # recorded now
    for known in (None, OTHER):  # the declaration removed or changed: lowered afresh, not replayed
        with pytest.raises(VerifierError):
            materialize(cache, tmp_path / "run.pte", calls, known)
    assert len(calls) == 5


def test_a_tampered_failure_record_is_lowered_again(tmp_path: Path) -> None:
    cache, calls = ArtifactCache(tmp_path / "cache"), list[int]()
    with pytest.raises(VerifierError):
        materialize(cache, tmp_path / "run.pte", calls, KNOWN)
    (sidecar,) = (tmp_path / "cache").iterdir()
    sidecar.write_text(sidecar.read_text().replace("rejects node 7", "rejects node 8"))
    with pytest.raises(VerifierError):
        materialize(cache, tmp_path / "run.pte", calls, KNOWN)
    assert len(calls) == 2 and cache.rebuilt == {"f" * 64}


class Branch(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y: torch.Tensor = self.linear(x)
        return y * 2 if y.sum() > 0 else y  # data-dependent: torch.export refuses to guard on it


KNOWN_BRANCH = KnownFailure("export cannot branch on data", raises="RuntimeError", match="data-dependent expression")


def recorded_failure(workdir: Path) -> list[Result]:
    """A case whose export fails as it declares, run twice: the failure fresh, then as recorded."""
    case = Case("branch", Branch, lambda generator: (torch.randn(2, 4, generator=generator),))
    case = Case(**{**vars(case), "known_failures": {"export": KNOWN_BRANCH}})
    cache = ArtifactCache(workdir / "cache")
    return [run(case, "export", cache, workdir / name) for name in ("first", "second")]


@pytest.mark.beside.with_args(recorded_failure)
def test_the_harness_judges_a_recorded_failure_as_the_fresh_one(beside: list[Result]) -> None:
    fresh, recorded = beside
    assert (fresh.status, fresh.cache, recorded.status, recorded.cache) == ("error", "", "error", "hit")
    assert recorded.error_types == fresh.error_types and recorded.error_message == fresh.error_message
    assert KNOWN_BRANCH.matches(recorded.error_types, recorded.error_message)
    assert recorded.reason == f"{fresh.reason} (recorded by an earlier run of this same lowering)"


MODEL = """\
import torch

SCALE = {scale}


def helper(x):
    return x * SCALE + {offset}


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)

    def forward(self, x):
        return helper(self.linear(x))


class Other(torch.nn.Module):
    def forward(self, x):
        return x + {other}
"""


def _load(tmp_path: Path, name: str, scale: float = 2.0, offset: float = 0.0, other: float = 1.0) -> ModuleType:
    path = tmp_path / f"{name}.py"
    path.write_text(MODEL.format(scale=scale, offset=offset, other=other))
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _key(source: ModuleType, seed: int = 0, shape: tuple[int, ...] = (2, 4)) -> str:
    torch.manual_seed(seed)
    model = source.Model()
    return artifact_key(
        case_name="model", backend="export", options={}, module=model, inputs=((torch.zeros(shape),), {}),
        dynamic_shapes=None, device=CPU, dtype=torch.float32,
    )  # fmt: skip


def test_the_key_follows_code_weights_and_inputs_and_nothing_else(tmp_path: Path) -> None:
    base = _key(_load(tmp_path, "model_a"))
    assert _key(_load(tmp_path, "model_b")) == base  # same code, weights and inputs: the same program
    assert _key(_load(tmp_path, "model_c", other=5.0)) == base  # another class in the file changed: not this one
    assert _key(_load(tmp_path, "model_d", offset=1.0)) != base  # a helper that forward calls changed
    assert _key(_load(tmp_path, "model_e", scale=3.0)) != base  # a constant that helper reads changed
    assert _key(_load(tmp_path, "model_f"), seed=1) != base  # other weights
    assert _key(_load(tmp_path, "model_g"), shape=(3, 4)) != base  # other input shapes


def test_keys_need_no_numpy(monkeypatch: pytest.MonkeyPatch) -> None:
    """An adopter's lock need not have numpy: torch then refuses `.numpy()`, and keys must still be made."""

    def refuse(self: torch.Tensor, *args: object, **kwargs: object) -> None:
        raise RuntimeError("Numpy is not available")

    monkeypatch.setattr(torch.Tensor, "numpy", refuse)
    weights = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    assert tensor_digest(weights) == tensor_digest(weights.clone()) != tensor_digest(weights + 1)
    assert lowering_key(MLP, "export", MLP.module(), MLP.calls()[0], CPU, options={}).digest is not None


class StandInTensorRT(ModuleType):
    """The four calls of Torch-TensorRT's that its engine cache makes, done by torch.export on the CPU. It
    checks torchyard's wiring (the key, the store, the load, the comparison), never TensorRT itself, which
    needs an NVIDIA GPU."""

    def __init__(self, *, save_fails: bool = False) -> None:
        super().__init__("torch_tensorrt")
        self.compiles, self.save_fails = 0, save_fails
        self.dynamo = SimpleNamespace(compile=self._compile)

    def _compile(self, program: torch.export.ExportedProgram, **options: Any) -> torch.nn.Module:
        assert options["enabled_precisions"] == {torch.float32}
        self.compiles += 1
        return program.module()

    def save(self, module: torch.nn.Module, path: str, *, output_format: str, **inputs: Any) -> None:
        assert output_format == "exported_program"
        if self.save_fails:
            Path(path).write_bytes(b"half a program")
            raise RuntimeError("the Python runtime cannot serialize this program")
        args, kwargs = tuple(inputs["arg_inputs"]), inputs["kwarg_inputs"]
        torch.export.save(torch.export.export(module, args, kwargs=kwargs), path)

    def load(self, path: str) -> torch.export.ExportedProgram:
        return torch.export.load(path)


def with_tensorrt(case: Case, cache: ArtifactCache, workdir: Path) -> Result:
    """The tensorrt backend's runner named (not looked up by availability: on the CPU it is unavailable)."""
    return run(case, "tensorrt", cache, workdir, runner=runner_for("tensorrt", cache))


def test_a_tensorrt_program_is_compiled_once_then_loaded_and_still_compared(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    standin = StandInTensorRT()
    monkeypatch.setitem(sys.modules, "torch_tensorrt", standin)
    cache = ArtifactCache(tmp_path / "cache")
    first, second = (with_tensorrt(MLP, cache, tmp_path / name) for name in ("first", "second"))
    assert (first.cache, first.status, second.cache, second.status) == ("miss", "passed", "hit", "passed")
    assert standin.compiles == 1  # the second run loaded the stored program
    assert first.artifact and second.artifact and first.artifact.endswith(".trt.ep")
    # a wrong program stored under the right key: the hit is run and compared, and fails
    plant_wrong_mlp(cache, "tensorrt", ".ep", tmp_path, options=tensorrt.OPTIONS, device=CPU)
    third = with_tensorrt(MLP, cache, tmp_path / "third")
    assert third.cache == "hit" and third.status == "failed" and "relative L2 error" in third.reason
    assert standin.compiles == 1


def test_a_tensorrt_program_that_cannot_be_saved_is_still_compared(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "torch_tensorrt", StandInTensorRT(save_fails=True))
    result = with_tensorrt(MLP, ArtifactCache(tmp_path / "cache"), tmp_path / "run")
    assert result.status == "passed", result.reason
    assert result.cache.startswith("unsaved: RuntimeError: the Python runtime cannot serialize this program")
    assert result.artifact is None and not list((tmp_path / "cache").glob("*.ep"))


def uncached(workdir: Path) -> tuple[list[Result], list[str]]:
    """The MLP opting out of the cache, lowered twice; then with a bug planted in the key code; and what the
    cache holds after."""
    cache = ArtifactCache(workdir / "cache")
    opted_out = dataclasses.replace(MLP, cache=False)
    results = [run(opted_out, "export", cache, workdir / name) for name in ("first", "second")]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(keys, "SIMPLE", "no type")  # `isinstance(obj, SIMPLE)` raises inside keys.py
        results.append(run(MLP, "export", cache, workdir / "faulty"))
    return results, sorted(path.name for path in cache.root.glob("*")) if cache.root and cache.root.exists() else []


@pytest.mark.beside.with_args(uncached)
def test_a_case_that_opts_out_or_that_the_key_code_fails_on_runs_uncached(
    beside: tuple[list[Result], list[str]],
) -> None:
    """Neither is the case's failure: it passes, uncached, and its result says why (the report's notes list it)."""
    (first, second, faulty), stored = beside
    for result in (first, second):
        assert (result.status, result.cache, result.cache_why) == ("passed", "off", "case 'mlp' sets cache=False")
    assert (faulty.status, faulty.cache) == ("passed", "unkeyable"), faulty.reason
    assert faulty.cache_why.startswith("torchyard's key code failed, a fault of torchyard's, not the model's: ")
    assert "TypeError" in faulty.cache_why and "(at torchyard/inimage/evaluation/cache/keys.py:" in faulty.cache_why
    assert stored == []
