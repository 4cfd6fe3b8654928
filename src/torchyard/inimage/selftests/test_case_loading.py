"""Cases load from the modules an entry names; a module that cannot be imported is one line."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from torchyard.inimage.cases import CaseLoadError, load_cases
from torchyard.inimage.evaluation.harness import evaluate
from torchyard.inimage.selftests.planted import TOLERANCES
from torchyard.inimage.selftests.whole_runs import REPORTS, whole_run
from torchyard.inimage.start.probe import CPU

pytestmark = pytest.mark.harness


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
