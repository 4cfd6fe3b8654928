"""What `nox -s workflows` runs under act, as data: each scenario is a workflow, an event, the repository
state it starts from, and what must come out (the jobs that ran, failed or were skipped by their `if:`, the
artifacts and their files, the trust the reports carry, lines of the log). run.py executes them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

Event = Literal["push", "pull_request", "pull_request_target"]
# What the scenario's branch (the pushed one, or the pull request's head) commits on top of the default branch.
# `model`: the adopter's policy gains a layer, so its exported program grows (a change the comparison reports).
Change = Literal["none", "docs", "model", "broken-matrix"]

REPORTS = ("env.json", "junit.xml", "parity.json", "parity.md")
DEFAULT_BRANCH = "main"
PULL_REQUEST = 7


@dataclass(frozen=True)
class Expect:
    """What a run must show. Jobs are act's job ids; a job in none of the three sets is not checked."""

    succeeded: frozenset[str]
    skipped: frozenset[str] = frozenset()
    failed: frozenset[str] = frozenset()
    # artifact name -> the files it must hold
    artifacts: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    # artifact name -> env.json's "trust"
    trust: Mapping[str, str] = field(default_factory=dict)
    # text the log must hold, and text it must not
    log: tuple[str, ...] = ()
    not_in_log: tuple[str, ...] = ()
    # text the jobs' step summaries must hold
    summary: tuple[str, ...] = ()


@dataclass(frozen=True)
class Scenario:
    name: str
    repository: Literal["torchyard", "adopter"]
    workflow: str
    event: Event
    branch: str
    change: Change
    expect: Expect
    # act's -j: that job and the jobs it needs (empty: every job the event starts)
    job: str = ""
    # the cpu accelerator's runners on the default branch: hosted (as committed) or self-hosted, so that
    # pull_request_target's approved job has an entry this machine can run
    cpu_runner: Literal["hosted", "self-hosted"] = "hosted"
    # repository variables (act --var)
    variables: Mapping[str, str] = field(default_factory=dict)
    # the jobs' environment (act --env)
    env: Mapping[str, str] = field(default_factory=dict)
    # .ci/run runs it (`-- --ci`): the others repeat what a kept one shows (ci.yml's push and pull request run
    # the lint and unit jobs .ci/run already ran; a push to another branch is untrusted like a pull request)
    ci: bool = True


CI = ".github/workflows/ci.yml"
ADOPTER = ".github/workflows/torchyard.yml"
ONE_LINE_ERROR = 'torchyard: matrix.toml: entry "cpu" > suites[0]: expected one of'
# Where the suites stop a second, unrelated red error must not appear (defects 2 and 5 of issue 44).
# The unit job runs the unit tests of the workflows only: .ci/run ran the whole tier before this session (and
# the scratch copy's cheaper matrix.toml is not the one the plan tests read).
UNIT_SUBSET = {"PYTEST_ADDOPTS": "-k workflows"}
SECOND_ERRORS = ("No files were found with the provided path", "no such file or folder")

SCENARIOS = (
    # ci.yml: the jobs that only repeat .ci/run's own steps (docs) are left out with -j; lint, unit and
    # locks are needed by the suites, so they run.
    Scenario(
        name="ci-push-main",
        ci=False,
        repository="torchyard",
        workflow=CI,
        event="push",
        branch=DEFAULT_BRANCH,
        change="none",
        job="compatibility",
        env=UNIT_SUBSET,
        expect=Expect(
            succeeded=frozenset({"lint", "unit", "locks", "plan", "suites", "compatibility"}),
            artifacts={"reports-cpu": REPORTS, "compatibility": ("compatibility.html",)},
            trust={"reports-cpu": "trusted"},
        ),
    ),
    Scenario(
        name="ci-pull-request",
        ci=False,
        repository="torchyard",
        workflow=CI,
        event="pull_request",
        branch="feature",
        change="docs",
        job="compatibility",
        env=UNIT_SUBSET,
        expect=Expect(
            succeeded=frozenset({"lint", "unit", "locks", "plan", "suites", "compatibility"}),
            artifacts={"reports-cpu": REPORTS, "compatibility": ("compatibility.html",)},
            trust={"reports-cpu": "untrusted"},
        ),
    ),
    Scenario(
        name="ci-pull-request-target",
        repository="torchyard",
        workflow=CI,
        event="pull_request_target",
        branch="feature",
        change="docs",
        cpu_runner="self-hosted",
        expect=Expect(
            succeeded=frozenset({"plan", "suites-pull-request"}),
            skipped=frozenset({"lint", "unit", "docs", "locks", "suites", "compatibility"}),
            artifacts={"reports-cpu-pull-request": REPORTS},
            trust={"reports-cpu-pull-request": "untrusted"},
        ),
    ),
    Scenario(
        name="ci-broken-matrix",
        repository="torchyard",
        workflow=CI,
        event="pull_request",
        branch="broken",
        change="broken-matrix",
        job="plan",
        expect=Expect(succeeded=frozenset(), failed=frozenset({"plan"}), log=(ONE_LINE_ERROR,)),
    ),
    # The workflow `torchyard init` writes, in an adopter made from examples/robot-policy. The push to the
    # default branch comes first: its trusted image leaves the dependency image the untrusted runs stand on.
    Scenario(
        name="adopter-push-main",
        repository="adopter",
        workflow=ADOPTER,
        event="push",
        branch=DEFAULT_BRANCH,
        change="none",
        expect=Expect(
            succeeded=frozenset({"plan", "suites", "compatibility"}),
            skipped=frozenset({"suites-pull-request"}),
            artifacts={"reports-cpu": REPORTS, "compatibility": ("compatibility.html",)},
            trust={"reports-cpu": "trusted"},
        ),
    ),
    # Held to the push's reports, downloaded as a hosted runner must (this host's kept baseline is not named):
    # the policy's new layer shows in the step summary as its program grown.
    Scenario(
        name="adopter-pull-request",
        repository="adopter",
        workflow=ADOPTER,
        event="pull_request",
        branch="feature",
        change="model",
        expect=Expect(
            succeeded=frozenset({"plan", "suites", "compatibility"}),
            skipped=frozenset({"suites-pull-request"}),
            artifacts={"reports-cpu": REPORTS, "compatibility": ("compatibility.html",)},
            trust={"reports-cpu": "untrusted"},
            log=("artifact reports-cpu of an earlier run into", "--baseline"),
            summary=("### What changed against", "program-size: `program ", "`robopolicy` on `export`"),
        ),
    ),
    Scenario(
        name="adopter-push-other-branch",
        ci=False,
        repository="adopter",
        workflow=ADOPTER,
        event="push",
        branch="feature",
        change="docs",
        # Only the default branch's pushes run (issue 70): its filter names it, and act, which does not apply
        # branch filters (nektos/act#2489), shows the plan job's own check: no job runs, nothing is pushed.
        variables={"TORCHYARD_REGISTRY": "127.0.0.1:9/torchyard"},
        expect=Expect(
            succeeded=frozenset(),
            skipped=frozenset({"plan", "suites", "compatibility", "suites-pull-request"}),
            not_in_log=(", pushed",),
        ),
    ),
    Scenario(
        name="adopter-broken-matrix",
        repository="adopter",
        workflow=ADOPTER,
        event="pull_request",
        branch="broken",
        change="broken-matrix",
        expect=Expect(
            succeeded=frozenset(),
            failed=frozenset({"plan"}),
            skipped=frozenset({"suites", "compatibility", "suites-pull-request"}),
            log=(ONE_LINE_ERROR,),
            not_in_log=SECOND_ERRORS,
        ),
    ),
)
