"""The workflows call only sessions and commands that exist, and read only keys the matrix JSON has."""

from __future__ import annotations

import argparse
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from torchyard.cli import build_parser
from torchyard.commands.matrix import hosted_labels, matrix_include
from torchyard.matrix import load_plan

REPO = Path(__file__).parents[2]
WORKFLOWS = sorted((REPO / ".github" / "workflows").glob("*.yml"))
TEMPLATE = REPO / "src" / "torchyard" / "templates" / "torchyard.yml"
BOTH = [REPO / ".github" / "workflows" / "ci.yml", TEMPLATE]


def run_lines() -> list[str]:
    lines = []
    for workflow in WORKFLOWS:
        document: dict[str, Any] = yaml.safe_load(workflow.read_text())
        for job in document["jobs"].values():
            lines += [step["run"] for step in job.get("steps", []) if "run" in step]
    return lines


@pytest.fixture(scope="module")
def nox_sessions() -> set[str]:
    """The sessions noxfile.py registers (imported the way nox does, from the repository root)."""
    import importlib.util
    import os

    import nox.registry

    here = Path.cwd()
    os.chdir(REPO)
    try:
        spec = importlib.util.spec_from_file_location("torchyard_noxfile", REPO / "noxfile.py")
        assert spec is not None and spec.loader is not None
        spec.loader.exec_module(importlib.util.module_from_spec(spec))
    finally:
        os.chdir(here)
    return set(nox.registry.get())


def test_there_are_workflows() -> None:
    assert [path.name for path in WORKFLOWS] == ["ci.yml", "ops.yml", "refresh.yml"]


def test_every_nox_session_called_exists(nox_sessions: set[str]) -> None:
    sessions = {item["session"] for item in matrix_include(load_plan(REPO / "matrix.toml").entries)["include"]}
    called = set()
    for line in run_lines():
        for name in re.findall(r"nox -s (\S+(?: [^ ]+ \}\}\S*)?)", line):
            if name == "${{ matrix.session }}":
                called.update(sessions)
            elif "${{ matrix.accelerator }}" in name:
                called.update(name.replace("${{ matrix.accelerator }}", a) for a in ("cpu", "cuda", "rocm", "xpu"))
            else:
                called.add(name)
    assert called, "no nox session found in the workflows"
    assert called <= nox_sessions, sorted(called - nox_sessions)


def test_every_torchyard_command_the_sessions_use_exists() -> None:
    subparsers = [action for action in build_parser()._actions if isinstance(action, argparse._SubParsersAction)]
    commands = set(subparsers[0].choices)
    sessions = (REPO / "src" / "torchyard" / "nox.py").read_text()
    used = set(re.findall(r'_torchyard\(session, install, "([a-z-]+)"', sessions))
    used |= set(re.findall(r'"([a-z]+)" if "--github" in session.posargs else "([a-z]+)"', sessions)[0])
    assert used and used <= commands, sorted(used - commands)


@pytest.mark.parametrize("workflow", [".github/workflows/ci.yml", "src/torchyard/templates/torchyard.yml"])
def test_matrix_keys_the_workflow_reads_are_in_the_json(workflow: str) -> None:
    text = (REPO / workflow).read_text()
    read = set(re.findall(r"matrix\.([a-z][a-z-]*)", text)) - {"toml"}
    include = matrix_include(load_plan(REPO / "matrix.toml").entries)["include"]
    assert read <= {"name", "accelerator", "session", "runs-on", "native", "lock-on-runner"}
    assert {"name", "accelerator", "session", "runs-on"} <= read
    for item in include:
        assert read <= set(item), sorted(read - set(item))


@pytest.mark.parametrize("workflow", [".github/workflows/ci.yml", "src/torchyard/templates/torchyard.yml"])
def test_native_entries_skip_every_docker_step(workflow: str) -> None:
    document = yaml.safe_load((REPO / workflow).read_text())
    steps = document["jobs"]["suites"]["steps"]
    docker_steps = [step for step in steps if "build-" in str(step.get("run", ""))]
    assert docker_steps and all("!matrix.native" in step.get("if", "") for step in docker_steps)
    include = matrix_include(load_plan(REPO / "matrix.toml").entries)["include"]
    assert {item["name"]: item["native"] for item in include}["mps"] is True


PINNED = re.compile(r"^[\w.-]+/[\w.-]+(/[\w./-]+)?@[0-9a-f]{40} # v\d+(\.\d+)*$")


@pytest.mark.parametrize(
    "workflow", [*(path.relative_to(REPO).as_posix() for path in WORKFLOWS), "src/torchyard/templates/torchyard.yml"]
)
def test_every_action_is_pinned_by_commit_with_its_tag(workflow: str) -> None:
    uses = re.findall(r"uses: (.+)", (REPO / workflow).read_text())
    assert uses and all(PINNED.match(use) for use in uses), [use for use in uses if not PINNED.match(use)]
    assert "astral-sh/uv" in (REPO / workflow).read_text()  # where each commit was copied from is named


@pytest.mark.parametrize("workflow", [".github/workflows/ci.yml", "src/torchyard/templates/torchyard.yml"])
def test_only_pushes_publish_images_and_credentials_stay_in_secrets(workflow: str) -> None:
    document = yaml.safe_load((REPO / workflow).read_text())
    job = document["jobs"]["suites"]
    assert job["env"]["TORCHYARD_REGISTRY"] == "${{ vars.TORCHYARD_REGISTRY }}"
    (build,) = [step for step in job["steps"] if "build-" in str(step.get("run", ""))]
    assert "github.event_name == 'push'" in build["env"]["PUSH"]
    for step in job["steps"]:
        for name, value in step.get("env", {}).items():
            if "PASSWORD" in name or "USERNAME" in name:
                # a pull_request job runs the pull request's noxfile: GitHub gives secrets to a pull request
                # from a branch of the same repository, so the workflow withholds them itself
                prefix = "${{ github.event_name != 'pull_request' && secrets."
                assert value.startswith(prefix) and value.endswith(" || '' }}"), (name, value)


@pytest.mark.parametrize("workflow", BOTH, ids=["ci", "template"])
def test_no_secret_reaches_a_job_that_runs_a_pull_requests_code_unguarded(workflow: Path) -> None:
    jobs = yaml.safe_load(workflow.read_text().replace("@SPEC@", "torchyard"))["jobs"]
    for name, job in jobs.items():
        if not runs_for(job, "pull_request"):
            continue
        for expression in re.findall(r"\$\{\{[^}]*secrets\.[^}]*\}\}", yaml.safe_dump(job, width=1000)):
            assert expression.startswith("${{ github.event_name != 'pull_request' && secrets."), (name, expression)


@pytest.mark.parametrize("workflow", BOTH, ids=["ci", "template"])
def test_the_pull_requests_output_issues_no_workflow_command(workflow: Path) -> None:
    """In the approved pull_request_target job the pull request's tests print to the runner's log: workflow
    commands (masks, annotations, outputs) are stopped around the run with a token it cannot guess."""
    job = yaml.safe_load(workflow.read_text().replace("@SPEC@", "torchyard"))["jobs"]["suites-pull-request"]
    (run,) = [step["run"] for step in job["steps"] if "torchyard test" in str(step.get("run", ""))]
    lines = [line.strip() for line in run.splitlines()]
    start, test, end = (
        lines.index('echo "::stop-commands::${token}"'),
        next(i for i, line in enumerate(lines) if line.startswith("torchyard test")),
        lines.index('echo "::${token}::"'),
    )
    assert start < test < end and "/dev/urandom" in run and lines[-1] == 'exit "${status}"'


@pytest.mark.parametrize("workflow", [".github/workflows/ci.yml", "src/torchyard/templates/torchyard.yml"])
def test_self_hosted_runners_run_pull_requests_only_approved_untrusted_and_sealed(workflow: str) -> None:
    """A pull request's workflow never reaches a self-hosted runner: those jobs come from pull_request_target
    (the base branch's file and tool), wait for an environment's reviewers, hold no secret, check the pull
    request out without credentials and run it untrusted, inside the seal."""
    text = (REPO / workflow).read_text()
    document = yaml.safe_load(text)
    events = document[True]  # YAML reads the key `on` as True
    assert "pull_request_target" in events and "pull_request" in events
    suites = document["jobs"]["suites"]
    assert suites["if"].startswith("github.event_name != 'pull_request_target'")
    assert "github.event_name == 'pull_request' && needs.plan.outputs.hosted" in suites["strategy"]["matrix"]
    job = document["jobs"]["suites-pull-request"]
    assert job["if"].startswith("github.event_name == 'pull_request_target'")
    assert job["environment"] == "self-hosted-pull-requests" and job["permissions"] == {"contents": "read"}
    assert job["strategy"]["matrix"] == "${{ fromJSON(needs.plan.outputs.self-hosted) }}"
    body = yaml.safe_dump(job)
    assert "secrets." not in body and "--unsandboxed" not in body
    checkouts = [step for step in job["steps"] if "actions/checkout" in str(step.get("uses", ""))]
    assert all(step["with"]["persist-credentials"] is False for step in checkouts)
    (run,) = [step for step in job["steps"] if "torchyard test" in str(step.get("run", ""))]
    assert run["env"]["TORCHYARD_TRUST"] == "untrusted" and run["working-directory"] == "pr"
    assert run["env"]["TORCHYARD_TRUSTED_MATRIX"].endswith("/trusted/matrix.toml")
    assert "nox" not in run["run"]  # the pull request's noxfile is never run
    for name in ("lint", "unit", "locks"):
        if name in document["jobs"]:
            assert document["jobs"][name]["if"] == "github.event_name != 'pull_request_target'"


def test_the_matrix_splits_hosted_and_self_hosted_entries() -> None:
    entries = load_plan(REPO / "matrix.toml").entries
    hosted = [item["name"] for item in matrix_include(entries, runners="hosted")["include"]]
    self_hosted = [item["name"] for item in matrix_include(entries, runners="self-hosted")["include"]]
    assert hosted == ["cpu", "cpu-bf16"] and self_hosted == ["cuda", "rocm", "xpu", "mps"]


def plan_script(workflow: Path) -> str:
    steps = yaml.safe_load(workflow.read_text())["jobs"]["plan"]["steps"]
    (step,) = [step for step in steps if step.get("id") == "plan"]
    return str(step["run"])


def run_plan_step(workflow: Path, tmp_path: Path, nox_says: str, nox_status: int) -> subprocess.CompletedProcess[str]:
    """The plan step's script as GitHub runs it (`bash -eo pipefail`), with a `nox` that says `nox_says` on
    stdout (where nox puts a session's stderr too) and exits `nox_status`."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "nox").write_text(
        f"#!/bin/sh\necho 'nox > Running session matrix' >&2\necho '{nox_says}'\nexit {nox_status}\n"
    )
    (bin_dir / "nox").chmod(0o755)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "RUNNER_TEMP": str(tmp_path), "GITHUB_OUTPUT": str(tmp_path / "out")}
    command = ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", plan_script(workflow)]
    return subprocess.run(command, env=env, capture_output=True, text=True, check=False)


@pytest.mark.real_subprocess
@pytest.mark.parametrize("workflow", BOTH, ids=["ci", "template"])
def test_the_plan_step_fails_with_the_matrix_commands_error_in_the_log(workflow: Path, tmp_path: Path) -> None:
    """nox merges torchyard's stderr into the output the step writes to a file: on failure the step fails and
    the one-line error reaches the log; on success each half of the matrix is an output."""
    error = "torchyard: matrix.toml: accelerators > cuda > runs-on: expected an array"
    failed = run_plan_step(workflow, tmp_path / "bad", error, 2)
    assert failed.returncode != 0 and error in failed.stderr
    passed = run_plan_step(workflow, tmp_path / "good", '{"include":[]}', 0)
    assert passed.returncode == 0, passed.stderr
    outputs = (tmp_path / "good" / "out").read_text().splitlines()
    assert outputs == ['matrix={"include":[]}', 'hosted={"include":[]}', 'self-hosted={"include":[]}']


@pytest.mark.parametrize("workflow", BOTH, ids=["ci", "template"])
def test_the_plan_step_runs_the_matrix_command_on_its_own_line(workflow: Path) -> None:
    """Never inside `$(...)`, where a failure is lost, and never with its error thrown away."""
    lines = [line.strip() for line in plan_script(workflow).splitlines()]
    assert any("nox -s matrix -- --github" in line for line in lines)
    assert not [line for line in lines if "$(nox" in line or "2>/dev/null" in line]


@pytest.mark.parametrize("workflow", [REPO / ".github" / "workflows" / "ci.yml", TEMPLATE])
def test_entries_locked_on_their_runner_are_locked_there_before_their_image(workflow: Path) -> None:
    """The trusted suites job locks a lock-on-runner entry that has no lock, before the image step, and
    uploads the lock; the locks job passes no flag that would excuse any other missing lock."""
    document = yaml.safe_load(workflow.read_text())
    steps = document["jobs"]["suites"]["steps"]
    names = [step.get("name", "") for step in steps]
    lock = next(i for i, name in enumerate(names) if name.startswith("the lock, made on this runner"))
    image = next(i for i, name in enumerate(names) if name.startswith("the image"))
    assert lock < image and steps[lock]["if"] == "${{ matrix.lock-on-runner }}"
    assert "nox -s lock -- ${{ matrix.name }}" in steps[lock]["run"]
    assert steps[lock + 1]["with"]["path"] == "lockfiles/${{ matrix.name }}.txt"
    assert "allow-missing" not in workflow.read_text()


@pytest.mark.parametrize("path", [REPO / ".github" / "workflows" / "ci.yml", TEMPLATE], ids=["ci", "template"])
def test_the_compatibility_job_merges_what_the_suites_upload(path: Path) -> None:
    jobs = yaml.safe_load(path.read_text().replace("@SPEC@", "torchyard"))["jobs"]
    job = jobs["compatibility"]
    assert job["needs"] == ["suites"] and "always()" in job["if"]  # also when an entry failed
    uploaded = {step["with"]["name"] for step in jobs["suites"]["steps"] if "upload-artifact" in step.get("uses", "")}
    download = next(step for step in job["steps"] if "download-artifact" in step.get("uses", ""))
    pattern = download["with"]["pattern"]
    assert pattern == "reports-*" and "reports-${{ matrix.name }}" in uploaded
    assert not any(name.startswith("reports-") for name in uploaded - {"reports-${{ matrix.name }}"})
    merge = next(step["run"] for step in job["steps"] if "nox -s report" in step.get("run", ""))
    assert '"$RUNNER_TEMP/reports"' in merge and "--html" in merge
    # Only when some suites job ran; with no report at all (every entry stopped early) no second error.
    assert "needs.suites.result == 'success' || needs.suites.result == 'failure'" in job["if"]
    assert merge.index('ls -A "$RUNNER_TEMP/reports"') < merge.index("exit 0") < merge.index("nox -s report")
    upload = next(step for step in job["steps"] if "upload-artifact" in step.get("uses", ""))
    assert upload["with"]["if-no-files-found"] == "ignore"


def runs_for(job: dict[str, Any], event: str) -> bool:
    """Whether a job's `if` lets it run for `event` (the workflows' conditions name events as
    `github.event_name == 'X'` or `!= 'X'`)."""
    condition = str(job.get("if", ""))
    if f"github.event_name != '{event}'" in condition:
        return False
    only = re.findall(r"github\.event_name == '([\w-]+)'", condition)
    return not only or event in only


GUARDED = re.compile(r"^\$\{\{ github\.event_name == 'pull_request' && '([\w.-]+)' \|\| [^']*\}\}$")


@pytest.mark.parametrize("workflow", BOTH, ids=["ci", "template"])
def test_no_pull_request_job_runs_on_labels_computed_from_the_pull_request(workflow: Path) -> None:
    """For `pull_request` the plan job runs the pull request's own code: no runs-on may come from its outputs
    or the matrix made of them, only from a literal in the workflow (a GitHub-hosted label)."""
    jobs = yaml.safe_load(workflow.read_text().replace("@SPEC@", "torchyard"))["jobs"]
    checked = 0
    for name, job in jobs.items():
        if not runs_for(job, "pull_request"):
            continue
        runs_on = job["runs-on"]
        assert isinstance(runs_on, str), (name, runs_on)
        if "${{" in runs_on:
            guarded = GUARDED.match(runs_on)
            assert guarded, (name, runs_on)
            runs_on = guarded.group(1)
            checked += 1
        assert runs_on in hosted_labels(), (name, runs_on)
    assert checked == 1  # the suites job: its matrix labels only for other events
    assert not runs_for(jobs["suites-pull-request"], "pull_request")
    assert runs_for(jobs["suites-pull-request"], "pull_request_target") and runs_for(jobs["suites"], "pull_request")


@pytest.mark.parametrize("workflow", BOTH, ids=["ci", "template"])
def test_only_the_approved_job_checks_the_pull_request_out(workflow: Path) -> None:
    """For pull_request_target the plan job (whose labels pick the self-hosted runners) checks out the base
    branch; the pull request's head is checked out only in the job an environment's reviewers approve, and
    without credentials."""
    jobs = yaml.safe_load(workflow.read_text().replace("@SPEC@", "torchyard"))["jobs"]
    heads = []
    for name, job in jobs.items():
        for step in job.get("steps", []):
            if "actions/checkout" not in str(step.get("uses", "")):
                continue
            ref = str(step.get("with", {}).get("ref", ""))
            if runs_for(job, "pull_request_target") and ref:
                heads.append(name)
                assert ref == "${{ github.event.pull_request.head.sha }}", (name, ref)
                assert job["environment"] == "self-hosted-pull-requests", name
                assert step["with"]["persist-credentials"] is False, name
    assert heads == ["suites-pull-request"]
    plan = jobs["plan"]
    # unconditional for every event but a push (which only the default branch's runs: test_init)
    assert runs_for(plan, "pull_request_target") and plan.get("if", "github.event_name != 'push'").startswith(
        "github.event_name != 'push'"
    )
    assert all("ref" not in step.get("with", {}) for step in plan["steps"])
    assert jobs["suites-pull-request"]["strategy"]["matrix"] == "${{ fromJSON(needs.plan.outputs.self-hosted) }}"


@pytest.mark.parametrize("workflow", BOTH, ids=["ci", "template"])
def test_a_pull_requests_plan_takes_its_labels_from_the_base_branch(workflow: Path) -> None:
    steps = yaml.safe_load(workflow.read_text().replace("@SPEC@", "torchyard"))["jobs"]["plan"]["steps"]
    names = [step.get("id") or step.get("name", "") for step in steps]
    trusted = next(position for position, name in enumerate(names) if name.startswith("the trusted matrix.toml"))
    # every untrusted plan names it, pull_request_target's included (an untrusted run without one is refused)
    assert trusted < names.index("plan") and steps[trusted]["if"].startswith(
        "startsWith(github.event_name, 'pull_request')"
    )
    plan_job = yaml.safe_load(workflow.read_text().replace("@SPEC@", "torchyard"))["jobs"]["plan"]
    assert runs_for(plan_job, "pull_request_target")
    assert 'git show FETCH_HEAD:matrix.toml > "$RUNNER_TEMP/trusted-matrix.toml"' in steps[trusted]["run"]
    assert "TORCHYARD_TRUSTED_MATRIX=" in steps[trusted]["run"]


@pytest.mark.parametrize("workflow", BOTH, ids=["ci", "template"])
def test_runs_are_grouped_per_event_and_pull_request_and_the_default_branch_is_never_cancelled(
    workflow: Path,
) -> None:
    """For pull_request_target github.ref is the default branch: a group by ref let any fork's pull request
    cancel main's run."""
    concurrency = yaml.safe_load(workflow.read_text())["concurrency"]
    group = concurrency["group"]
    assert group.startswith("${{ github.workflow }}-${{ github.event_name }}-")
    assert "${{ github.event.pull_request.number\n" in group or "github.event.pull_request.number ||" in group
    assert "github.event.repository.default_branch) && github.run_id" in group  # a group of its own
    assert concurrency["cancel-in-progress"] == "${{ startsWith(github.event_name, 'pull_request') }}"


@pytest.mark.parametrize("workflow", BOTH, ids=["ci", "template"])
def test_reports_are_written_and_uploaded_outside_the_checkout(workflow: Path) -> None:
    """A pull request could commit reports/<entry> as a link to a host folder, and the upload follows links:
    every suites job writes its reports under $RUNNER_TEMP and uploads from there."""
    jobs = yaml.safe_load(workflow.read_text().replace("@SPEC@", "torchyard"))["jobs"]
    for name in ("suites", "suites-pull-request"):
        steps = jobs[name]["steps"]
        (run,) = [
            step["run"]
            for step in steps
            if re.search(r"nox -s \$\{\{ matrix.session|torchyard test", step.get("run", ""))
        ]
        (command,) = [line for line in run.splitlines() if re.search(r"nox -s |torchyard test", line)]
        assert '--reports "$RUNNER_TEMP/reports"' in command.split(" || ")[0], run
        (upload,) = [
            step
            for step in steps
            if str(step.get("with", {}).get("name", "")).startswith("reports-")
            and step["uses"].startswith("actions/upload-artifact@")
        ]
        # A native entry's venv run writes <entry>-local (run/venv.py); the pull-request job runs no native one.
        native = "${{ matrix.native && '-local' || '' }}" if name == "suites" else ""
        assert upload["with"]["path"] == "${{ runner.temp }}/reports/${{ matrix.name }}" + native
        assert upload["with"]["if-no-files-found"] == "warn"  # an early failure has none: its own error says why


@pytest.mark.parametrize("workflow", BOTH, ids=["ci", "template"])
def test_a_pull_requests_suites_are_held_to_the_default_branchs_last_reports(workflow: Path) -> None:
    """Issue 60: a hosted runner keeps nothing, so a pull request's job downloads the entry's reports from the
    default branch's newest push run that has them (a push: no pull request's run, whatever its branch's name)
    and names them with --baseline only where a parity.json came down; the token reads, and writes nothing."""
    jobs = yaml.safe_load(workflow.read_text().replace("@SPEC@", "torchyard"))["jobs"]
    suites = jobs["suites"]
    (download,) = [s for s in suites["steps"] if s.get("uses", "").startswith("dawidd6/action-download-artifact@")]
    assert download["if"] == "github.event_name == 'pull_request'" and download["continue-on-error"] is True
    assert download["with"]["branch"] == "${{ github.event.repository.default_branch }}"
    assert (download["with"]["event"], download["with"]["name"]) == ("push", "reports-${{ matrix.name }}")
    assert download["with"]["if_no_artifact_found"] == "warn" and download["with"]["search_artifacts"] is True
    assert download["with"]["path"] == "${{ runner.temp }}/baseline"
    assert suites["permissions"] == {"contents": "read", "actions": "read"}
    (run,) = [s["run"] for s in suites["steps"] if "matrix.session" in s.get("run", "")]
    found = 'if [ -f "$RUNNER_TEMP/baseline/parity.json" ]; then baseline=(--baseline "$RUNNER_TEMP/baseline"); fi'
    assert found in run
    assert run.rstrip().endswith('"${baseline[@]}"')
    order = [s.get("name", s.get("uses", "")) for s in suites["steps"]]
    assert order.index(download["name"]) < order.index("suites in the image")


def test_the_test_session_passes_the_reports_folder_to_torchyard_test(nox_sessions: set[str]) -> None:
    import nox.registry

    class Session:
        def __init__(self) -> None:
            self.posargs = ["cpu", "--reports", "/runner/temp/reports"]
            self.ran: list[tuple[str, ...]] = []

        def install(self, *args: str) -> None:
            pass

        def run(self, *args: str, **kwargs: object) -> None:
            self.ran.append(args)

    session = Session()
    nox.registry.get()["test-cpu"].func(session)
    assert session.ran == [("torchyard", "test", "--accelerator", "cpu", "cpu", "--reports", "/runner/temp/reports")]
    args, rest = build_parser().parse_known_args(session.ran[0][1:])
    assert args.reports == Path("/runner/temp/reports") and rest == ["cpu"]


def test_an_adopters_pull_request_builds_from_the_default_branchs_matrix_and_never_pushes() -> None:
    """A pull request is untrusted (trust.py): without the default branch's matrix.toml its build was refused, and
    with TORCHYARD_REGISTRY set it asked to push, which an untrusted run never does. (A push to another branch
    runs nothing: `test_init`.)"""
    jobs = yaml.safe_load(TEMPLATE.read_text().replace("@SPEC@", "torchyard"))["jobs"]
    for job in ("plan", "suites"):
        (step,) = [s for s in jobs[job]["steps"] if str(s.get("name", "")).startswith("the trusted matrix.toml")]
        assert "pull_request" in step["if"] and "push" not in step["if"]
        assert step["env"]["BASE_REF"] == "${{ github.base_ref || github.event.repository.default_branch }}"
    (image,) = [
        s for s in jobs["suites"]["steps"] if s.get("name") == "the image (pulled, built from cache, or built cold)"
    ]
    assert "github.ref == format('refs/heads/{0}', github.event.repository.default_branch)" in image["env"]["PUSH"]


STAND_INS = REPO / "tests" / "workflows" / "actions"


@pytest.mark.parametrize("workflow", [*WORKFLOWS, TEMPLATE], ids=lambda path: path.name)
def test_every_pinned_action_has_a_stand_in_taking_the_inputs_the_workflows_pass(workflow: Path) -> None:
    """`nox -s workflows` serves tests/workflows/actions/<name> at each pinned commit: each must exist and
    declare every input a step passes (act would pass an undeclared one silently)."""
    from tests.workflows.run import stand_ins

    jobs = yaml.safe_load(workflow.read_text().replace("@SPEC@", "torchyard"))["jobs"]
    served = {argument.split("=", 1)[1].split("@")[0] for argument in stand_ins(workflow)}
    for job in jobs.values():
        for step in job.get("steps", []):
            if "uses" not in step:
                continue
            action = step["uses"].split("@")[0]
            assert action in served
            declared = yaml.safe_load((STAND_INS / action.split("/")[1] / "action.yml").read_text())["inputs"]
            assert set(step.get("with", {})) <= set(declared), step


def test_the_workflow_runs_read_job_results_from_acts_log() -> None:
    from tests.workflows.run import outcome

    log = [
        '{"job":"ci/plan","jobID":"plan","msg":"x","time":"2026-12-02T07:52:00Z"}',
        '{"job":"ci/plan","jobID":"plan","jobResult":"failure","msg":"done","time":"2026-12-02T07:52:11Z"}',
        '{"job":"ci/lint","jobID":"lint","jobResult":"skipped","msg":"Skipping job","time":"2026-12-02T07:52:00Z"}',
        "Error: Job 'plan' failed",
    ]
    result = outcome(log)
    assert result.results == {"plan": {"failure"}, "lint": {"skipped"}}
    assert result.seconds["ci/plan"] == 11
    assert "Error: Job 'plan' failed" in result.log


def writes(permissions: object) -> bool:
    """Whether a `permissions` value grants any write (`write-all`, or a scope set to `write`)."""
    if isinstance(permissions, str):
        return permissions == "write-all"
    return isinstance(permissions, dict) and "write" in permissions.values()


@pytest.mark.parametrize("workflow", [*WORKFLOWS, TEMPLATE], ids=lambda path: path.name)
def test_a_job_with_a_writing_token_never_leaves_it_in_the_checkout(workflow: Path) -> None:
    """Route 10 of issue 57: actions/checkout keeps the job's token in .git/config unless told not to, where
    every later step (`nox -s lock` building an sdist's metadata) reads it. A job whose token writes checks out
    without it; only the step that pushes (create-pull-request, its `token` input) holds it."""
    document: dict[str, Any] = yaml.safe_load(workflow.read_text())
    for name, job in document["jobs"].items():
        if not writes(job.get("permissions", document.get("permissions", "write-all"))):
            continue
        steps = job.get("steps", [])
        checkouts = [step for step in steps if str(step.get("uses", "")).startswith("actions/checkout@")]
        assert checkouts, name
        for step in checkouts:
            assert (step.get("with") or {}).get("persist-credentials") is False, name


def test_the_refresh_job_is_the_one_that_writes() -> None:
    document: dict[str, Any] = yaml.safe_load((REPO / ".github" / "workflows" / "refresh.yml").read_text())
    assert writes(document["jobs"]["refresh"]["permissions"])


def _runs_suites(job: dict[str, Any]) -> bool:
    lines = "\n".join(str(step.get("run", "")) for step in job.get("steps", []))
    return bool(re.search(r"torchyard test|nox -s (test-|ops|\$\{\{ matrix\.session)", lines))


def test_every_job_that_runs_suites_tells_torchyard_when_it_ends() -> None:
    """Issue 57, route 2, and its review: an entry's timeout could outlast the job, which the runner then ended
    mid-run (no hand-back, the container left running), and a deadline counted from the run's start ignored
    the job's time already spent. Each job that runs suites writes its end (its start plus timeout-minutes)
    first, as TORCHYARD_JOB_ENDS_AT, and the run's deadline fits inside what is left."""
    documents = [*WORKFLOWS, REPO / "src" / "torchyard" / "templates" / "torchyard.yml"]
    checked = 0
    for path in documents:
        for name, job in yaml.safe_load(path.read_text())["jobs"].items():
            if not _runs_suites(job):
                continue
            checked += 1
            first = str(job["steps"][0].get("run", ""))
            wanted = f'echo "TORCHYARD_JOB_ENDS_AT=$(( $(date +%s) + {job["timeout-minutes"]} * 60 ))" >> "$GITHUB_ENV"'
            assert first == wanted, (path.name, name)
    assert checked >= 4


@pytest.mark.parametrize("workflow", BOTH, ids=["ci", "template"])
def test_a_cancelled_jobs_signal_reaches_torchyard(workflow: Path) -> None:
    """Issue 70: a cancelled job's container outlived it. The runner signals the step's shell: each step that runs
    the suites hands the signal on, by `exec` (nox passes it on to torchyard) or by a trap that sends the
    backgrounded torchyard SIGTERM (a background job ignores SIGINT), and waits for it to end."""
    jobs = yaml.safe_load(workflow.read_text().replace("@SPEC@", "torchyard"))["jobs"]
    scripts = [str(step.get("run", "")) for job in jobs.values() for step in job.get("steps", [])]
    suites = [
        line.strip() for script in scripts for line in script.splitlines() if "nox -s ${{ matrix.session }}" in line
    ]
    assert suites and all(line.startswith("exec nox -s") for line in suites), suites
    tests = [script for script in scripts if "torchyard test " in script]
    assert tests, "no step runs torchyard test"
    for script in tests:
        assert "torchyard test " in script and '" &\n' in script, script
        assert "trap 'kill -TERM \"$child\" 2>/dev/null' INT TERM" in script
        assert 'while kill -0 "$child" 2>/dev/null; do wait "$child" || status=$?; done' in script


def test_a_session_without_its_own_venv_starts_torchyard_with_the_checkout_off_sys_path() -> None:
    """Issue 70: `python -m torchyard` put the working folder (the checkout) first on sys.path, so a committed
    `torchyard/__main__.py` ran in the host's own process. The sessions start it with `-P`."""
    import nox.registry

    import torchyard.nox

    class Session:
        def __init__(self) -> None:
            self.posargs, self.ran = ["cpu"], list[tuple[str, ...]]()

        def run(self, *args: str, **kwargs: object) -> None:
            self.ran.append(args)

    before = dict(nox.registry.get())
    session = Session()
    try:
        torchyard.nox.register()  # no install: the environment nox runs in
        nox.registry.get()["test-cpu"].func(session)
    finally:
        nox.registry.get().clear()
        nox.registry.get().update(before)
    assert session.ran and session.ran[0][1:4] == ("-P", "-m", "torchyard"), session.ran


def test_a_dispatched_run_reaches_a_self_hosted_runner_from_the_default_branch_only() -> None:
    """A helper's route: `workflow_dispatch` runs any branch's noxfile and Dockerfile, and the suites job put it on
    the self-hosted runners with the registry's secrets. Every job on `matrix.runs-on` now refuses a dispatch of
    another branch."""
    document = yaml.safe_load((REPO / ".github" / "workflows" / "ci.yml").read_text())
    events = document.get("on", document.get(True))
    assert "workflow_dispatch" in events
    for name, job in document["jobs"].items():
        if "matrix.runs-on" not in str(job.get("runs-on", "")):
            continue
        condition = " ".join(str(job.get("if", "")).split())
        default = "github.ref == format('refs/heads/{0}', github.event.repository.default_branch)"
        dispatched = f"github.event_name != 'workflow_dispatch' || {default}"
        assert dispatched in condition or "github.event_name == 'pull_request_target'" in condition, (name, condition)
