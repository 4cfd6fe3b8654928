"""Each test's outcome from its result: the suite's pass rule, the case's known failure, and a reference that
cannot be made failing one test; recorded on the test's report for the controller's reports."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pytest

from torchyard.inimage.cases import Case
from torchyard.inimage.evaluation.harness import REFERENCE_FAILED, Result
from torchyard.inimage.evaluation.localize.result import NOT_LOCALIZED
from torchyard.inimage.evaluation.training import STEP_FAILS
from torchyard.inimage.plugin.collection import param
from torchyard.inimage.plugin.verdicts import pass_reason
from torchyard.inimage.report import diverges_in_brief
from torchyard.inimage.start.workers import worker_id
from torchyard.names import SuiteName

RECORD_KEY = "torchyard"
PARITY_EAGER = pytest.StashKey[dict[str, str]]()  # case -> its parity eager test, where it is selected
REPORTERS = pytest.StashKey[dict[tuple[str, str], str]]()  # (case, reference failure) -> the test failing it


def parity_eager_tests(items: list[pytest.Item]) -> dict[str, str]:
    """Each case's parity eager test among `items`, by case name: where its reference fails, that test says so."""
    found = {}
    for item in items:
        case = param(item, "case")
        if isinstance(case, Case) and item.get_closest_marker("parity") and param(item, "parity_backend") == "eager":
            found[case.name] = item.nodeid
    return found


def record(request: pytest.FixtureRequest, suite: str, result: Result, outcome: str, reason: str = "") -> None:
    """Attach the result to the test report (JUnit property too) for the controller to collect."""
    data = {**result.as_dict(), "suite": suite, "outcome": outcome, "reason": reason or result.reason}
    data["worker"] = worker_id(request.config)  # which process: the controller merges them all
    request.node.user_properties.append((RECORD_KEY, json.dumps(data, default=str)))


def conclude(
    request: pytest.FixtureRequest, suite: SuiteName, case: Case, result: Result, *, passed: bool, rule: str
) -> None:
    """Apply the suite's verdict (`passed`, by its `rule`, in words) and the case's known failure to `result`. Record,
    then skip / xfail / fail / pass the test: every skip and known failure keeps its reason, a pass that
    rests on a rule says which, and a failure is one line (no traceback of torchyard's own code).

    A known failure is exact: only the error it names (type and message pattern) is expected; any other
    outcome on that backend fails, and a backend that starts working fails until the entry is removed.
    A case whose reference cannot be made fails once (`reference_reporter`); its other tests skip, saying why.
    """
    if result.status == "skipped":
        record(request, suite, result, "skipped")
        pytest.skip(result.reason)
    if result.reason.startswith(REFERENCE_FAILED):
        reporter = reference_reporter(request.config, case.name, result.reason, request.node.nodeid)
        if reporter != request.node.nodeid:
            failing = reporter.rpartition("::")[2]
            why = f"no reference: {result.reason.removeprefix(REFERENCE_FAILED)} (failed once, in {failing})"
            record(request, suite, result, "skipped", why)
            pytest.skip(why)
    known = case.known_failure(result.backend)
    why_pass = ""
    if known is not None and known.computes is not None and (suite != "parity" or (passed and result.known_values)):
        # Wrong values are known where values are compared, and where the bounds can tell them from the
        # right ones (bf16's can be wider than the bug); elsewhere the backend just runs.
        if suite == "parity":
            why_pass = f"passes: these bounds cannot tell the reference from {known.expectation()} ({known.reason})"
        known = None
    if known is not None:
        if passed:
            record(request, suite, result, "failed", f"known failure no longer fails; remove it: {known.reason}")
            pytest.fail(
                f"{case.name} on {result.backend} now works: remove its known failure ({known.reason})", pytrace=False
            )
        unchecked = node_unchecked(result.diverges) if known.node else ""
        if (result.status == "error" and known.matches(result.error_types, result.error_message)) or (
            result.status == "failed"
            and known.computes is not None
            and result.known_values
            and (diverges_at(result.diverges) == known.node or unchecked)
        ):
            observed = result.reason + (f"; its node {known.node} not checked: {unchecked}" if unchecked else "")
            record(request, suite, result, "xfailed", f"{known.reason} [observed: {observed}]")
            pytest.xfail(known.reason)
        mismatch = known.mismatch(result.error_types, result.error_message) if result.status == "error" else ""
        if result.known_values and known.node:
            found = diverges_at(result.diverges)
            mismatch = f"it diverges first at node {found}" if found else "localization named no node"
        got = f"expected {known.expectation()}, got {result.status}: {result.reason}"
        got += f" ({mismatch})" if mismatch else ""
        record(request, suite, result, "failed", got)
        pytest.fail(f"{case.name} on {result.backend} ({suite}): {got}", pytrace=False)
    record(
        request,
        suite,
        result,
        "passed" if passed else "failed",
        why_pass or pass_reason(suite, result, rule) if passed else "",
    )
    if not passed:
        where = diverges_in_brief(result.diverges) if result.diverges else ""
        pytest.fail(
            f"{case.name} on {result.backend} ({suite}): {result.status}: {result.reason}{where}", pytrace=False
        )


def node_unchecked(diverges: Mapping[str, Any] | None) -> str:
    """Why localization looked at no node ("" where it did): it is off for the entry, or the backend's stack
    cannot be localized. A known wrong value's node is then unchecked, and its values alone decide."""
    if not diverges:
        return "the entry's localize-timeout is off"
    note = str(diverges.get("note", ""))
    return note.removeprefix(NOT_LOCALIZED) if note.startswith(NOT_LOCALIZED) else ""


def diverges_at(diverges: Mapping[str, Any] | None) -> str:
    """The node localization names where a result first diverges ("" where it named none, or did not run)."""
    node = diverges.get("node") if diverges else None
    return str(node.get("node", "")) if isinstance(node, dict) else ""


def reference_reporter(config: pytest.Config, case: str, reason: str, nodeid: str) -> str:
    """The one test that fails for a case's reference that cannot be made (`reason`): the parity suite's eager
    test where it is selected and the model's forward is what fails (every suite needs it), else the first
    test of this process that meets the failure (a case's tests all run in one process: `xdist_group`)."""
    reporters = config.stash.setdefault(REPORTERS, {})
    if (case, reason) not in reporters:
        designated = config.stash.get(PARITY_EAGER, {}).get(case)
        forward = not reason.startswith(REFERENCE_FAILED + STEP_FAILS)
        reporters[case, reason] = designated if designated is not None and forward else nodeid
    return reporters[case, reason]
