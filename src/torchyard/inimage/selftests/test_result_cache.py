"""The result cache replays a passing result only while nothing that decides it changed: the case's weights,
inputs, code and bounds, the run's settings, the stack and torchyard's own code each move its key; a failure,
a known failure and a case that opts out are evaluated every run; `--rerun` neither replays nor keeps."""

from __future__ import annotations

import dataclasses
import importlib
import linecache
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from torchyard import contract
from torchyard.inimage.cases import Case, KnownFailure
from torchyard.inimage.cases.builtin import CASES
from torchyard.inimage.evaluation import evaluations as evaluations_module
from torchyard.inimage.evaluation.cache import project_code
from torchyard.inimage.evaluation.cache import results as result_cache
from torchyard.inimage.evaluation.cache.results import ResultCache
from torchyard.inimage.evaluation.evaluations import Evaluations
from torchyard.inimage.evaluation.harness import Result
from torchyard.inimage.selftests.beside import whole_run_environment
from torchyard.inimage.start.probe import CPU
from torchyard.inimage.start.settings import RunSettings
from torchyard.inimage.start.tolerances import load_tolerances
from torchyard.inimage.suites import test_export
from torchyard.names import SUITE_NAMES

# Every suite that evaluates cases keeps its results; the ops suite's samples are not kept.
pytestmark = pytest.mark.harness(*(suite for suite in SUITE_NAMES if suite != "ops"))

MLP = next(case for case in CASES if case.name == "mlp")


def settings(root: Path, **changes: object) -> RunSettings:
    made = RunSettings("cpu", "fp32", root, load_tolerances(), (), ("parity", "train"), None, {})
    return dataclasses.replace(made, **changes)  # type: ignore[arg-type]


def evaluate(root: Path, case: Case, backend: str = "eager", *, rerun: bool = False, train: bool = False) -> Result:
    """`case` on `backend` as a fresh run's suites evaluate it, with the entry's result cache under `root`."""
    run = settings(root, rerun=rerun)
    kept = ResultCache(root / "verdicts", rerun=rerun)
    evaluations = Evaluations(run, root / "scratch", kept)
    return evaluations.train_result(case, backend) if train else evaluations.result(case, backend)


def kept_files(root: Path) -> list[Path]:
    return sorted((root / "verdicts").glob("*.json")) if (root / "verdicts").is_dir() else []


def no_reference(*args: object, **kwargs: object) -> object:
    raise AssertionError("a replayed result made its reference again")


def test_an_unchanged_result_replays_unevaluated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = evaluate(tmp_path, MLP)
    assert first.status == "passed" and not first.replayed and len(kept_files(tmp_path)) == 1
    monkeypatch.setattr(evaluations_module, "case_reference", no_reference)
    again = evaluate(tmp_path, MLP)
    assert again.replayed and again.status == "passed"
    assert [c.as_dict() for c in again.comparisons] == [c.as_dict() for c in first.comparisons]


def scaled_weights() -> torch.nn.Module:
    module = MLP.make_module()
    with torch.no_grad():
        next(iter(module.parameters())).mul_(1.5)
    return module


def doubled_inputs(generator: torch.Generator) -> tuple[torch.Tensor, ...]:
    (call,) = dataclasses.replace(MLP, extra_batch=None).calls()
    return tuple(2 * x for x in call.args)


@pytest.mark.parametrize(
    "change",
    [
        pytest.param({"make_module": scaled_weights}, id="weights"),
        pytest.param({"make_inputs": doubled_inputs}, id="inputs"),
        pytest.param({"tolerances": {"float32.eager": {"max-rel-l2": 1e-3}}}, id="bounds"),
        pytest.param({"compare": "statistics"}, id="comparison"),
    ],
)
def test_a_change_to_what_decides_a_result_evaluates_it_again(tmp_path: Path, change: dict[str, object]) -> None:
    evaluate(tmp_path, MLP)
    changed = evaluate(tmp_path, dataclasses.replace(MLP, **change))  # type: ignore[arg-type]
    assert not changed.replayed and changed.status == "passed"
    assert len(kept_files(tmp_path)) == 2


@pytest.mark.parametrize(
    "change",
    [
        pytest.param({"tolerances": {"float32.train-eager-adamw": {"max-scaled-error": 1e-3}}}, id="train-bound"),
        pytest.param({"train": False}, id="no-training"),
        pytest.param({"tolerances": {"float32.inductor": {"max-rel-l2": 1e-3}}}, id="another-backends-bound"),
    ],
)
def test_a_change_that_decides_other_results_replays_this_one(tmp_path: Path, change: dict[str, object]) -> None:
    """Issue 58 (smp): a train bound or `train=False` set on a case evaluated its inference results again."""
    evaluate(tmp_path, MLP)
    assert evaluate(tmp_path, dataclasses.replace(MLP, **change)).replayed  # type: ignore[arg-type]


def test_torchyards_own_code_and_the_backend_are_in_the_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    evaluate(tmp_path, MLP)
    assert not evaluate(tmp_path, MLP, "export").replayed  # another backend: its own result
    monkeypatch.setattr(result_cache, "harness_digest", lambda: "another torchyard")
    assert not evaluate(tmp_path, MLP).replayed


def test_rerun_evaluates_and_keeps_nothing(tmp_path: Path) -> None:
    assert not evaluate(tmp_path, MLP, rerun=True).replayed
    assert kept_files(tmp_path) == []
    evaluate(tmp_path, MLP)
    (kept,) = kept_files(tmp_path)
    before = kept.read_text()
    assert not evaluate(tmp_path, MLP, rerun=True).replayed
    assert kept.read_text() == before
    assert evaluate(tmp_path, MLP).replayed


def test_whole_runs_of_the_self_tests_neither_replay_nor_keep() -> None:
    assert whole_run_environment({})[contract.RERUN] == "1"


def test_a_failure_is_never_kept(tmp_path: Path) -> None:
    tight = dataclasses.replace(MLP, tolerances={"float32.eager": {"max-scaled-error": 1e-30, "max-rel-l2": 1e-30}})
    for _ in range(2):
        assert evaluate(tmp_path, tight).status == "failed"
    assert kept_files(tmp_path) == []


def test_a_case_with_a_known_failure_or_that_opts_out_is_evaluated_every_run(tmp_path: Path) -> None:
    known = dataclasses.replace(MLP, known_failures={"eager": KnownFailure("planted", computes=MLP.make_module)})
    opted_out = dataclasses.replace(MLP, cache=False)
    for case in (known, opted_out, known, opted_out):
        assert not evaluate(tmp_path, case).replayed
    assert kept_files(tmp_path) == []


def test_a_torn_entry_is_a_miss_and_is_kept_anew(tmp_path: Path) -> None:
    evaluate(tmp_path, MLP)
    (kept,) = kept_files(tmp_path)
    kept.write_text('{"result": {"case": "mlp", "status": "pas')
    assert not evaluate(tmp_path, MLP).replayed
    assert evaluate(tmp_path, MLP).replayed


def test_an_entry_that_says_anything_but_passed_is_not_replayed(tmp_path: Path) -> None:
    evaluate(tmp_path, MLP)
    (kept,) = kept_files(tmp_path)
    kept.write_text(kept.read_text().replace('"status": "passed"', '"status": "failed"'))
    assert not evaluate(tmp_path, MLP).replayed


def test_a_training_step_replays_without_its_float64_step(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = evaluate(tmp_path, MLP, "train-eager-sgd", train=True)
    assert first.status == "passed", first.reason

    def no_step(*args: object, **kwargs: object) -> object:
        raise AssertionError("a replayed step made its float64 step again")

    monkeypatch.setattr(evaluations_module, "make_train_reference", no_step)
    assert evaluate(tmp_path, MLP, "train-eager-sgd", train=True).replayed


def test_a_replayed_lowering_passes_the_suites_that_judged_its_file_when_it_was_evaluated(tmp_path: Path) -> None:
    """The export and runtime suites ask that the program was saved to a file that holds something: a replay's
    program file went with its run's scratch folder, and what its evaluation saw is what decides."""
    first = evaluate(tmp_path, MLP, "export")
    assert first.artifact is not None and first.artifact_bytes > 0 and test_export.passes(first)
    shutil.rmtree(tmp_path / "scratch")  # as the run's scratch folder goes when its session ends
    again = evaluate(tmp_path, MLP, "export")
    assert again.replayed and test_export.passes(again) and again.artifact_bytes == first.artifact_bytes


def test_a_change_to_the_built_in_corpus_is_keyed_by_case_and_any_other_file_by_the_harness(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "inimage" / "cases").mkdir(parents=True)
    (tmp_path / "inimage" / "cases" / "builtin.py").write_text("CASES = []\n")
    (tmp_path / "contract.py").write_text("A = 1\n")
    monkeypatch.setattr(result_cache, "TORCHYARD", tmp_path)
    digest = result_cache.harness_digest.__wrapped__
    before = digest()
    (tmp_path / "inimage" / "cases" / "builtin.py").write_text("CASES = ['changed']\n")
    assert digest() == before  # each built-in case's own code is in its case digest
    (tmp_path / "contract.py").write_text("A = 2\n")
    assert digest() != before


PROJECT = {
    "shop/__init__.py": "from shop.first import First\nfrom shop.second import Second\n",  # as smp's: every model
    "shop/deep.py": "SCALE = 1.0\n\ndef factor():\n    return 1.0\n",
    "shop/helper.py": "from shop.deep import factor\n\ndef scaled(x):\n    return x * factor()\n",
    "shop/first.py": (
        "import torch\nfrom shop import helper\nfrom shop.deep import SCALE\n\n"
        "class First(torch.nn.Module):\n"
        "    def __init__(self):\n        super().__init__()\n        self.linear = torch.nn.Linear(4, 4)\n\n"
        "    def forward(self, x, gain=SCALE):\n        return helper.scaled(self.linear(x)) * gain\n"
    ),
    "shop/second.py": (
        "import torch\n\nclass Second(torch.nn.Module):\n"
        "    def __init__(self):\n        super().__init__()\n        self.linear = torch.nn.Linear(4, 4)\n\n"
        "    def forward(self, x):\n        return self.linear(x)\n"
    ),
    "shop/cases.py": (
        "import torch\nfrom shop.first import First\nfrom shop.second import Second\n"
        "from torchyard.cases import Case\n\n"
        "def inputs(generator):\n    return (torch.randn(2, 4, generator=generator),)\n\n"
        "CASES = [Case('first', First, inputs), Case('second', lambda: Second(), inputs)]\n"
    ),
    "patcher.py": "import torch\n\ndef gelu(x, approximate='none'):\n    return x\n\ntorch.nn.functional.gelu = gelu\n",
}


@pytest.fixture
def shop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A project of two models in their own files, one case file, a helper two imports away from the first
    model, and a module that patches torch on import that no case reaches."""
    for name, text in PROJECT.items():
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text(text)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(result_cache, "COLLECTED", {})
    monkeypatch.setattr(torch.nn.functional, "gelu", torch.nn.functional.gelu)  # the patch undone after
    _forget_shop()
    yield tmp_path
    _forget_shop()
    sys.modules.pop("patcher", None)


def _forget_shop() -> None:
    """As a new process: the shop's modules imported again, its files read again."""
    for name in [name for name in sys.modules if name == "shop" or name.startswith("shop.")]:
        del sys.modules[name]
    linecache.clearcache()
    project_code._digest.cache_clear()
    project_code._syntax.cache_clear()


def _shop_keys(root: Path, *, collected: bool = False) -> dict[str, str | None]:
    """Each shop case's key as a fresh run sees the files now (`collected`: with the project as the run's
    collection left it, taken before)."""
    _forget_shop()
    if not collected:
        result_cache.COLLECTED.clear()  # as a new run's collection leaves it: what the file of cases imports
    cases = importlib.import_module("shop.cases").CASES
    cache = ResultCache(root / "verdicts")
    return {case.name: cache.key(case, "eager", CPU) for case in cases}


def test_a_change_to_one_model_moves_that_models_keys_only(shop: Path) -> None:
    """Issue 58: a one-line change to one model costs that model's results, not the project's, though the
    package's `__init__.py` imports every model (segmentation_models_pytorch's does)."""
    first = _shop_keys(shop)
    assert None not in first.values()
    (shop / "shop/second.py").write_text(
        PROJECT["shop/second.py"].replace("return self.linear(x)", "return -self.linear(x)")
    )
    second = _shop_keys(shop)
    assert second["first"] == first["first"] and second["second"] != first["second"]
    # a case added to the file of cases moves no other case's key: the case's own code counts by its walk
    (shop / "shop/cases.py").write_text(PROJECT["shop/cases.py"] + "CASES.append(Case('third', Second, inputs))\n")
    third = _shop_keys(shop)
    assert third["first"] == second["first"] and third["second"] == second["second"]
    # Issue 69: nor does a case with a factory of its own, defined beside the others (a detection repository's
    # new case sent every result back to evaluation); a function the module's other code names still counts.
    added = "\ndef build_fourth():\n    return Second()\n\nCASES.append(Case('fourth', build_fourth, inputs))\n"
    (shop / "shop/cases.py").write_text((shop / "shop/cases.py").read_text() + added)
    fourth = _shop_keys(shop)
    assert fourth["first"] == second["first"] and fourth["second"] == second["second"] and fourth["fourth"]
    # nor a case whose model lives in a module of its own that the file of cases imports for it (vit-pytorch's
    # DeepViT added beside its CaiT): importing that module only binds names
    (shop / "shop/fifth.py").write_text(PROJECT["shop/second.py"].replace("Second", "Fifth"))
    added = "from shop.fifth import Fifth\nCASES.append(Case('fifth', Fifth, inputs))\n"
    (shop / "shop/cases.py").write_text((shop / "shop/cases.py").read_text() + added)
    fifth = _shop_keys(shop)
    assert fifth["first"] == second["first"] and fifth["second"] == second["second"] and fifth["fifth"]
    # a new module that acts on import moves every key, though no case reaches it
    (shop / "shop/acts.py").write_text("import torch\n\nTRACE = []\nTRACE.append(torch.get_default_dtype())\n")
    (shop / "shop/cases.py").write_text((shop / "shop/cases.py").read_text() + "import shop.acts\n")
    assert _shop_keys(shop)["first"] != fifth["first"]
    (shop / "shop/acts.py").write_text(
        "import torch\n\nclass Registry:\n    def __init_subclass__(cls):\n        torch.manual_seed(0)\n"
    )
    (shop / "shop/late_model.py").write_text("from shop.acts import Registry\n\nclass Made(Registry):\n    pass\n")
    (shop / "shop/cases.py").write_text((shop / "shop/cases.py").read_text() + "import shop.late_model\n")
    registry = _shop_keys(shop)
    (shop / "shop/late_model.py").write_text("from shop.acts import Registry\n\nclass Other(Registry):\n    pass\n")
    assert _shop_keys(shop)["first"] != registry["first"]  # a class whose making runs the project's code acts
    for acts in ("def seeded(x=torch.manual_seed({})):\n    return x\n", "def __getattr__(name):\n    return {}\n"):
        (shop / "shop/more.py").write_text("import torch\n\n" + acts.format(0))
        (shop / "shop/cases.py").write_text((shop / "shop/cases.py").read_text() + "import shop.more\n")
        before = _shop_keys(shop)
        (shop / "shop/more.py").write_text("import torch\n\n" + acts.format(1))
        assert _shop_keys(shop)["first"] != before["first"], acts  # a default runs on import; any name runs that
    (shop / "shop/cases.py").write_text((shop / "shop/cases.py").read_text() + "SIZE = build_fourth\n")
    assert _shop_keys(shop)["first"] != registry["first"]  # named beyond the cases: it may act for any of them


PAIR = (
    "import torch\n\nGAIN = 1.0\n\n"
    "class Left(torch.nn.Module):\n"
    "    def __init__(self):\n        super().__init__()\n        self.linear = torch.nn.Linear(4, 4)\n\n"
    "    def forward(self, x):\n        other = globals()['Rig' + 'ht']\n"
    "        return self.linear(x) * GAIN * other.SCALE * other.forward.__defaults__[0]\n\n"
    "class Right(torch.nn.Module):\n    SCALE = 1.0\n\n"
    "    def __init__(self):\n        super().__init__()\n        self.linear = torch.nn.Linear(4, 4)\n\n"
    "    def forward(self, x, factor=1.0):\n        return self.linear(x)\n"
)
PAIR_CASES = (
    "import torch\nfrom shop.pair import Left, Right\nfrom torchyard.cases import Case\n\n"
    "def inputs(generator):\n    return (torch.randn(2, 4, generator=generator),)\n\n"
    "CASES = [Case('left', Left, inputs), Case('right', Right, inputs)]\n"
)


def test_two_models_of_one_file_are_keyed_apart(shop: Path) -> None:
    """Issue 58 (whisper's encoder and decoder live in one model.py): a change inside one model's methods moves
    the cases that reach it; a change to what the file does on import, or to a model's class-level values,
    moves them all (issue 69: one model read another's constant by a computed name)."""
    (shop / "shop/pair.py").write_text(PAIR)
    (shop / "shop/pair_cases.py").write_text(PAIR_CASES)

    def pair_keys() -> dict[str, str | None]:
        _forget_shop()
        cache = ResultCache(shop / "verdicts")
        return {case.name: cache.key(case, "eager", CPU) for case in importlib.import_module("shop.pair_cases").CASES}

    before = pair_keys()
    (shop / "shop/pair.py").write_text(PAIR.replace("return self.linear(x)\n", "return -self.linear(x)\n"))
    after = pair_keys()
    assert after["left"] == before["left"] and after["right"] != before["right"]
    # Left reads Right's class-level value by a computed name, none of Right's code running: the value counts
    (shop / "shop/pair.py").write_text(PAIR.replace("SCALE = 1.0", "SCALE = 2.0"))
    assert pair_keys()["left"] != before["left"]
    (shop / "shop/pair.py").write_text(PAIR.replace("factor=1.0", "factor=2.0"))  # made as the class is
    assert pair_keys()["left"] != before["left"]
    (shop / "shop/pair.py").write_text(PAIR.replace("GAIN = 1.0", "GAIN = 2.0"))
    moved = pair_keys()
    assert moved["left"] != before["left"] and moved["right"] != before["right"]


def test_a_module_another_model_imports_later_moves_no_key(shop: Path) -> None:
    """Issue 58 (smp's encoders, each imported as its model is built): a module that one worker had imported when
    it keyed a case and another had not moved the key from run to run. What a module imports counts where
    collection loaded it."""
    (shop / "shop/late.py").write_text("import torch\n\nclass Late(torch.nn.Module):\n    pass\n")
    (shop / "shop/second.py").write_text(PROJECT["shop/second.py"] + "\ndef build():\n    from shop import late\n")
    result_cache.COLLECTED.clear()
    before = _shop_keys(shop)
    importlib.import_module("shop.late")  # as another case's model does, in this worker only
    cache = ResultCache(shop / "verdicts")
    after = {case.name: cache.key(case, "eager", CPU) for case in importlib.import_module("shop.cases").CASES}
    assert after == before


SHARED_BASE = {
    "shop/base.py": (
        "import torch\n\nclass Base(torch.nn.Module):\n    def forward(self, x):\n        return self.head(x)\n"
    ),
    "shop/head_b.py": (
        "import torch\n\nclass HeadB(torch.nn.Module):\n    def forward(self, x):\n        return torch.relu(x) * 2\n"
    ),
    "shop/base_cases.py": (
        "import torch\nfrom shop.base import Base\nfrom shop.head_b import HeadB\nfrom torchyard.cases import Case\n\n"
        "class A(Base):\n    def __init__(self):\n        super().__init__()\n"
        "        self.head = torch.nn.Linear(4, 4)\n\n"
        "class B(Base):\n    def __init__(self):\n        super().__init__()\n        self.head = HeadB()\n\n"
        "def inputs(generator):\n    return (torch.randn(2, 4, generator=generator),)\n\n"
        "CASES = [Case('a', A, inputs), Case('b', B, inputs)]\n"
    ),
}


def test_another_case_compiled_in_the_worker_moves_no_key(shop: Path) -> None:
    """Issue 58 (smp's FPN and Segformer missed every run after one that evaluated): torch.compile puts the modules
    a compiled frame reads (`__import_<module>`) and its compiled code among the globals of the module it compiled,
    so compiling one model that shares a base class with another made the other's key follow into the first's
    files, in that worker only."""
    for name, text in SHARED_BASE.items():
        (shop / name).write_text(text)
    result_cache.COLLECTED.clear()
    _forget_shop()
    cases: dict[str, Case] = {case.name: case for case in importlib.import_module("shop.base_cases").CASES}
    before = ResultCache(shop / "verdicts").key(cases["a"], "eager", CPU)
    torch._dynamo.reset()
    try:
        compiled = torch.compile(cases["b"].module(), backend="eager")
        compiled(torch.randn(2, 4))
        assert any(name.startswith("__import_shop") for name in vars(sys.modules["shop.base"]))  # what it plants
        after = ResultCache(shop / "verdicts").key(cases["a"], "eager", CPU)
    finally:
        torch._dynamo.reset()
    assert after == before


HIDDEN = (
    "import importlib\nimport torch\n\n__import_shop_dot_deep = importlib.import_module('shop.deep')\n"
    "__import_shop_dot_deep.factor()  # for what it does on import: a kernel registered, say\n\n"
    "class Hidden(torch.nn.Module):\n"
    "    def __init__(self):\n        super().__init__()\n        self.linear = torch.nn.Linear(4, 4)\n\n"
    "    def forward(self, x):\n        return self.linear(x)\n"
)
HIDDEN_CASES = (
    "import torch\nfrom shop.hidden import Hidden\nfrom torchyard.cases import Case\n\n"
    "def inputs(generator):\n    return (torch.randn(2, 4, generator=generator),)\n\n"
    "CASES = [Case('hidden', Hidden, inputs)]\n"
)


def test_a_module_its_source_imports_under_a_name_shaped_as_the_compilers_still_counts(shop: Path) -> None:
    """The globals torch.compile installs are left out only where the module's own source never names them: a
    pull request cannot hide what a model imports behind dynamo's naming."""
    (shop / "shop/hidden.py").write_text(HIDDEN)
    (shop / "shop/hidden_cases.py").write_text(HIDDEN_CASES)

    def hidden_key() -> str | None:
        _forget_shop()
        result_cache.COLLECTED.clear()
        cases = importlib.import_module("shop.hidden_cases").CASES
        return ResultCache(shop / "verdicts").key(cases[0], "eager", CPU)

    before = hidden_key()
    (shop / "shop/deep.py").write_text(PROJECT["shop/deep.py"].replace("    return 1.0", "    return 2.0"))
    assert hidden_key() != before


LAZY = {
    "shop/lazy/__init__.py": (
        "import importlib\n\ndef __getattr__(name):  # submodules loaded when first asked (PEP 562)\n"
        "    if name == 'ops':\n        return importlib.import_module(f'.{name}', __name__)\n"
        "    raise AttributeError(name)\n"
    ),
    "shop/lazy/ops.py": "import torch\n\ndef fused(x):\n    return torch.relu(x)\n",
    "shop/lazy/model.py": (
        "import torch\nfrom shop import lazy\n\nclass Net(torch.nn.Module):\n"
        "    def __init__(self):\n        super().__init__()\n        self.linear = torch.nn.Linear(4, 4)\n\n"
        "    def forward(self, x):\n        return lazy.ops.fused(self.linear(x))\n"
    ),
    "shop/lazy_cases.py": (
        "import torch\nfrom shop.lazy.model import Net\nfrom torchyard.cases import Case\n\n"
        "def inputs(generator):\n    return (torch.randn(2, 4, generator=generator),)\n\n"
        "CASES = [Case('lazy', Net, inputs)]\n"
    ),
}


def test_a_submodule_its_package_loads_when_first_asked_is_keyed_loaded_or_not(shop: Path) -> None:
    """The attack review: `pkg.ops.fused(x)` where the package loads `ops` on first access. The helper's file was
    in no key until a compile put `__import_pkg_dot_ops` among the model module's globals: a change to it replayed
    the old pass. It counts by its file, whether or not this worker has loaded it."""
    (shop / "shop/lazy").mkdir()
    for name, text in LAZY.items():
        (shop / name).write_text(text)

    def lazy_key() -> str | None:
        _forget_shop()
        result_cache.COLLECTED.clear()
        return ResultCache(shop / "verdicts").key(importlib.import_module("shop.lazy_cases").CASES[0], "eager", CPU)

    before = lazy_key()
    importlib.import_module("shop.lazy.ops")  # as the model's first forward in this worker does, after collection
    case = importlib.import_module("shop.lazy_cases").CASES[0]
    assert ResultCache(shop / "verdicts").key(case, "eager", CPU) == before
    (shop / "shop/lazy/ops.py").write_text(LAZY["shop/lazy/ops.py"].replace("torch.relu(x)", "torch.relu(x) * 2"))
    assert lazy_key() != before


def test_code_the_walk_does_not_name_still_moves_the_key(shop: Path) -> None:
    """The attacker's review (issue 57, third round): a helper two imports away from the model, a default
    argument from a module constant, a patch of torch made on import by a module no case reaches: each changes
    what the model computes, and a pass must not be replayed over it. So does what a model's module does on
    import (a flag set, a kernel registered), though no other case reaches that model."""
    keys = [_shop_keys(shop)]
    # a function two imports away from `first` (first -> helper -> deep), its body only: `first` alone
    (shop / "shop/deep.py").write_text(PROJECT["shop/deep.py"].replace("    return 1.0", "    return 2.0"))
    keys.append(_shop_keys(shop))
    assert keys[-1]["first"] != keys[-2]["first"] and keys[-1]["second"] == keys[-2]["second"]
    # a module constant (`first`'s default argument): what runs on import, so every case
    (shop / "shop/deep.py").write_text(PROJECT["shop/deep.py"].replace("SCALE = 1.0", "SCALE = 2.0"))
    keys.append(_shop_keys(shop))
    assert keys[-1]["first"] != keys[-2]["first"] and keys[-1]["second"] != keys[-2]["second"]
    # `second`'s module sets a flag on import, then registers a kernel (as `torch.library.impl` does): `first`,
    # which never reaches `second`, moves with each
    (shop / "shop/second.py").write_text(PROJECT["shop/second.py"] + "\nFLAG = True\n")
    keys.append(_shop_keys(shop))
    assert keys[-1]["first"] != keys[-2]["first"]
    registry = (
        "\nKERNELS = {}\n\ndef register(function):\n    KERNELS[function.__name__] = function\n    return function\n"
    )
    kernel = "\n@register\ndef gelu(x):\n    return x\n"
    (shop / "shop/second.py").write_text(PROJECT["shop/second.py"] + registry + kernel)
    keys.append(_shop_keys(shop))
    (shop / "shop/second.py").write_text(PROJECT["shop/second.py"] + registry + kernel.replace("return x", "return -x"))
    keys.append(_shop_keys(shop))
    assert keys[-1]["first"] != keys[-2]["first"]
    before_body = keys[-1]
    importlib.import_module("patcher")
    result_cache.snapshot_project()
    patched = _shop_keys(shop)
    assert patched["first"] != before_body["first"] and patched["second"] != before_body["second"]
    assert not any("site-packages/torch/" in path for path, _ in project_code.closure(["shop.first"]))


def test_the_project_is_keyed_as_collection_left_it(shop: Path) -> None:
    """A self-test that patches torch while the run goes on moves no key of the run's own results: the plugin
    takes the patches when collection ends."""
    result_cache.snapshot_project()
    first = _shop_keys(shop, collected=True)
    importlib.import_module("patcher")
    assert _shop_keys(shop, collected=True) == first


@dataclasses.dataclass
class Observation:
    frame: torch.Tensor
    step: int


class Opaque:
    def __init__(self, value: torch.Tensor) -> None:
        self.value = value


def test_inputs_count_by_every_value_and_an_input_the_key_cannot_read_is_not_kept(tmp_path: Path) -> None:
    def observed(middle: float) -> Case:
        def inputs(generator: torch.Generator) -> tuple[Observation]:
            frame = torch.zeros(4, 1000)
            frame[2, 500] = middle  # a tensor's repr shows its corners, never this
            return (Observation(frame, 3),)

        return dataclasses.replace(MLP, name="observed", make_inputs=inputs)

    cache = ResultCache(tmp_path / "verdicts")
    assert cache.key(observed(0.0), "eager", CPU) != ResultCache(tmp_path / "verdicts").key(observed(1.0), "eager", CPU)
    opaque = dataclasses.replace(MLP, name="opaque", make_inputs=lambda g: (Opaque(torch.zeros(2)),))
    assert cache.key(opaque, "eager", CPU) is None


def test_what_of_the_environment_reaches_the_stack_is_in_the_key(tmp_path: Path) -> None:
    keys = [
        ResultCache(tmp_path, env=env).key(MLP, "eager", CPU)
        for env in ({}, {"TORCH_ALLOW_TF32_CUBLAS_OVERRIDE": "1"}, {"OMP_NUM_THREADS": "1"}, {"HOME": "/x"})
    ]
    assert len(set(keys[:3])) == 3 and keys[3] == keys[0]
    assert contract.stack_environment({"TORCHINDUCTOR_CACHE_DIR": "/c/gw0", "TORCHYARD_TRUST": "x"}) == {}


def test_a_pytest_hook_of_the_project_counts_for_every_case(shop: Path) -> None:
    """An attacker's review (issue 69): a conftest's `pytest_configure` that patches torch runs at collection,
    before any record, and pytest calls it by its name alone, which no code of the module names: its body was
    left out of the module's shared part. A pytest hook counts whole."""
    hooks = shop / "hooks_mod.py"
    hooks.write_text("import torch\n\ndef pytest_configure(config):\n    pass\n")
    try:
        importlib.import_module("hooks_mod")
        before = _shop_keys(shop)
        hooks.write_text(
            "import torch\n\ndef pytest_configure(config):\n    torch.nn.Tanh.forward = torch.Tensor.log\n"
        )
        sys.modules.pop("hooks_mod")
        importlib.import_module("hooks_mod")
        assert _shop_keys(shop)["first"] != before["first"]
    finally:
        sys.modules.pop("hooks_mod", None)
