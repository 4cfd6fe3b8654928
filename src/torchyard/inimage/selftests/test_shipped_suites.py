"""The suites as they ship, in whole runs over planted cases: wrong values and shapes fail, a reference that
cannot be made fails once, and every failure is one line."""

from __future__ import annotations

import json

import pytest

from torchyard.inimage import SUITES_DIR
from torchyard.inimage.selftests.planted import RUN_DEVICE
from torchyard.inimage.selftests.whole_runs import REPORTS, reports_of, whole_run

pytestmark = pytest.mark.harness


PLANTED_CASES = """
import torch
from torchyard.inimage.cases import Case
from torchyard.inimage.selftests.planted import Switch


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
    return (SUITES_DIR / module).read_text()


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
            "*test_export_save_load_run?*scaled_when_traced*? PASSED*",
            "*test_export_save_load_run?*narrowed_when_traced*? FAILED*",
            "*test_export_save_load_run?*broken_everywhere*? SKIPPED*",
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
    # The inference reference runs on the run's device; the train suite's float64 step, on the CPU.
    because = {
        suite: f"no reference: eager on {device} fails: ValueError: the policy is broken"
        for suite, device in [("export", RUN_DEVICE), ("parity", RUN_DEVICE), ("train", "cpu")]
    }
    assert {key: (outcome, reason.split(" (at ")[0]) for key, (outcome, reason) in recorded.items()} == {
        key: ("skipped", because[key[0]]) for key in [("export", "export"), ("parity", "export"),
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
        line.startswith(f"- FAIL: `broken` on eager (parity): reference: eager on {RUN_DEVICE} fails")
        for line in markdown
    )
