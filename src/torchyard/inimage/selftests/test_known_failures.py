"""Known failures are exact: only the error (type and message pattern) or the wrong values a case names are
expected, and a backend that starts working fails until its entry is removed."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch

from torchyard.inimage.cases import Case, KnownFailure
from torchyard.inimage.cases.builtin import XNNPACK_TANH_GELU, erf_gelu_block
from torchyard.inimage.evaluation.backends import Runner
from torchyard.inimage.evaluation.harness import Result, evaluate
from torchyard.inimage.selftests.planted import BY_NAME, TOLERANCES, computing
from torchyard.inimage.selftests.whole_runs import REPORTS, reports_of, whole_run
from torchyard.inimage.start.probe import CPU

pytestmark = pytest.mark.harness


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
import dataclasses
import pytest
import torch
from torchyard.inimage.cases.builtin import CASES, erf_gelu_block
from torchyard.inimage.evaluation.harness import evaluate
from torchyard.inimage.start.tolerances import load_tolerances
from torchyard.inimage.plugin import outcomes
from torchyard.inimage.suites import test_export as export_suite
from torchyard.inimage.suites import test_parity as parity_suite
from torchyard.inimage.suites import test_runtime as runtime_suite
from torchyard.inimage.evaluation.localize.result import Localization, NodeDivergence
from torchyard.inimage.evaluation.metrics import Comparison
from torchyard.inimage.selftests.planted import computing

SUITES = {"export": export_suite, "parity": parity_suite, "runtime": runtime_suite}


def conclude(request, suite, case, result):  # as the suite's own test concludes
    rule = SUITES[suite]
    outcomes.conclude(request, suite, case, result, passed=rule.passes(result), rule=rule.RULE)

NAMED = next(case for case in CASES if case.name == "gelu_tanh")  # its known wrong value names its node, gelu
KNOWN = NAMED.known_failure("executorch-xnnpack")
assert KNOWN.node == "gelu"
CASE = dataclasses.replace(NAMED, known_failures={"executorch-xnnpack": dataclasses.replace(KNOWN, node="")})


def result(runner, tmp_path, dtype=torch.float32, case=CASE):
    return evaluate(
        case, "executorch-xnnpack", device=torch.device("cpu"), dtype=dtype,
        tolerances=load_tolerances(), workdir=tmp_path, runner=runner,
    )


def localized_at(node, operator):  # what localization records for a result that first diverges at `node`
    error = Comparison("", [4, 8], "torch.float32", 1e-3, 1e-3, 1e-3, 1.0, "relative L2 error 0.001 > 1e-05")
    found = NodeDivergence(node, operator, "builtin.py:1 in forward", error, ())
    return Localization("executorch-xnnpack", found, 2, 1.0).as_dict()


@pytest.mark.parity
def test_as_known_at_its_node(request, tmp_path):
    r = result(computing(erf_gelu_block), tmp_path, case=NAMED)
    r.diverges = localized_at("gelu", "aten.gelu.default")
    conclude(request, "parity", NAMED, r)


@pytest.mark.parity
def test_as_known_at_an_earlier_node(request, tmp_path):
    r = result(computing(erf_gelu_block), tmp_path, case=NAMED)
    r.diverges = localized_at("addmm", "aten.addmm.default")
    conclude(request, "parity", NAMED, r)


@pytest.mark.parity
def test_as_known_at_a_later_node(request, tmp_path):
    r = result(computing(erf_gelu_block), tmp_path, case=NAMED)
    r.diverges = localized_at("linear", "aten.linear.default")
    conclude(request, "parity", NAMED, r)


@pytest.mark.parity
def test_as_known_where_no_node_was_named(request, tmp_path):
    r = result(computing(erf_gelu_block), tmp_path, case=NAMED)
    r.diverges = Localization("executorch-xnnpack", None, 3, 1.0, "no node leaves the bounds").as_dict()
    conclude(request, "parity", NAMED, r)


@pytest.mark.parity
def test_as_known_where_the_stack_cannot_localize(request, tmp_path):
    r = result(computing(erf_gelu_block), tmp_path, case=NAMED)
    cannot = Localization("executorch-xnnpack", None, 0, 0.0, "not localized: ExecuTorch 1.2.0 has no taps")
    r.diverges = cannot.as_dict()
    conclude(request, "parity", NAMED, r)


@pytest.mark.parity
def test_as_known_where_localization_is_off(request, tmp_path):
    r = result(computing(erf_gelu_block), tmp_path, case=NAMED)
    conclude(request, "parity", NAMED, r)


@pytest.mark.parity
def test_other_wrong_values_where_a_node_is_known(request, tmp_path):
    r = result(computing(erf_gelu_block, scale=1.001), tmp_path, case=NAMED)
    conclude(request, "parity", NAMED, r)


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
            "*::test_as_known_at_its_node XFAIL*",
            "*::test_as_known_at_an_earlier_node FAILED*",
            "*::test_as_known_at_a_later_node FAILED*",
            "*::test_as_known_where_no_node_was_named FAILED*",
            "*::test_as_known_where_the_stack_cannot_localize XFAIL*",
            "*::test_as_known_where_localization_is_off XFAIL*",
            "*::test_other_wrong_values_where_a_node_is_known FAILED*",
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
    assert "computes, diverging first at node gelu), got failed: " in output
    assert "(it diverges first at node linear)" in output and "(it diverges first at node addmm)" in output
    assert "(localization named no node)" in output
    lines = result.stdout.lines  # the failure's own section: its whole line (the summary's is cut to the width)
    start = next(n for n, line in enumerate(lines) if line.startswith("_") and "other_wrong_values_where" in line)
    other = " ".join(lines[start + 1 : start + 4])
    assert "got failed" in other and "diverges first" not in other and "localiz" not in other, other
    assert not [line for line in result.stdout.lines if line.startswith(("E  ", ">  "))]  # one line each
    recorded = json.loads((reports_of(result) / "parity.json").read_text())["results"]
    unchecked = sorted(item["reason"].partition("; its node gelu not checked: ")[2] for item in recorded)
    assert unchecked[-2:] == ["ExecuTorch 1.2.0 has no taps]", "the entry's localize-timeout is off]"]
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
from torchyard.inimage.evaluation.harness import evaluate
from torchyard.inimage.start.tolerances import load_tolerances
from torchyard.inimage.plugin import outcomes
from torchyard.inimage.suites import test_export as export_suite


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
    outcomes.conclude(request, "export", CASE, result, passed=export_suite.passes(result), rule=export_suite.RULE)


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
