"""`nox -s workflows`: the GitHub Actions workflows (ci.yml, and the one `torchyard init` writes) run under act
on this machine's Docker engine, every runner label mapped to this host, GitHub's own actions replaced by the
stand-ins in tests/workflows/actions (served at the commits the workflows pin), for the events in
scenarios.py; then each run's jobs, artifacts and log are checked.

Each scenario gets a scratch repository (this checkout's files, or an adopter made from examples/robot-policy
with `torchyard init`), a bare `origin` holding its branch and refs/pull/N/head and /merge, an event JSON and
act's artifact server. `--only NAME` runs one scenario; `--keep` keeps the scratch folder.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import sys
import tempfile
import time
import tomllib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from tests.cpu_index import CPU_WHEELS, mirrored
from tests.workflows.scenarios import DEFAULT_BRANCH, PULL_REQUEST, SCENARIOS, Scenario
from torchyard.util import proc

REPO = Path(__file__).parents[2]
STAND_INS = Path(__file__).parent / "actions"
EXAMPLE = REPO / "examples" / "robot-policy"
OWNERS = {"torchyard": "torchyard/torchyard", "adopter": "robopolicy/robopolicy"}
USES = re.compile(r"uses:\s*([\w.-]+)/([\w.-]+)@([0-9a-f]{40})")
# The runner labels the workflows' runs-on name (a self-hosted entry's list starts with self-hosted).
LABELS = ("ubuntu-24.04", "self-hosted")
# Which entries a run's suites take: the cpu entry (the others need devices or repeat it).
ENTRY = "cpu"
IDENTITY = {"GIT_AUTHOR_NAME": "act", "GIT_AUTHOR_EMAIL": "act@localhost"}
IDENTITY |= {"GIT_COMMITTER_NAME": "act", "GIT_COMMITTER_EMAIL": "act@localhost"}


def git(repo: Path, *args: str) -> str:
    completed = proc.run(["git", "-C", str(repo), *args], env={**os.environ, **IDENTITY}, capture=True)
    return completed.stdout.strip()


def stand_ins(workflow: Path) -> list[str]:
    """act's --local-repository arguments: every action the workflow pins, served from its stand-in."""
    pins = sorted(set(USES.findall(workflow.read_text())))
    missing = [f"{owner}/{name}" for owner, name, _ in pins if not (STAND_INS / name / "action.yml").is_file()]
    if missing:
        raise SystemExit(f"{workflow}: no stand-in in {STAND_INS} for {', '.join(missing)}")
    return [f"--local-repository={owner}/{name}@{sha}={STAND_INS / name}" for owner, name, sha in pins]


# The workflow files, as `--before REV` takes them from an earlier commit (the rest stays this checkout's).
WORKFLOW_FILES = (".github/workflows/ci.yml", "src/torchyard/templates/torchyard.yml")


def snapshot(dest: Path, before: str = "") -> None:
    """This checkout's files as git sees them (tracked and untracked, not ignored), in a fresh repository;
    with `before`, the workflow files as that revision had them."""
    listed = git(REPO, "ls-files", "-z", "--cached", "--others", "--exclude-standard").split("\0")
    for name in filter(None, listed):
        source = REPO / name
        if source.is_file() and not source.is_symlink():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name)
    for name in WORKFLOW_FILES if before else ():
        (dest / name).write_text(git(REPO, "show", f"{before}:{name}") + "\n")


def adopter(scratch: Path, before: str = "") -> tuple[Path, Path]:
    """examples/robot-policy made an adopter with `torchyard init` (from a wheel of this checkout) and
    `torchyard lock`; returns it and the venv torchyard was installed into."""
    source = scratch / "torchyard-source"
    snapshot(source, before)
    proc.run(["uv", "build", "--quiet", "--wheel", "--out-dir", str(scratch / "dist"), str(source)])
    (wheel,) = (scratch / "dist").glob("torchyard-*.whl")
    venv = scratch / "torchyard-venv"
    proc.run(["uv", "venv", "--quiet", "--python", "3.11", str(venv)])
    proc.run(["uv", "pip", "install", "--quiet", "--python", str(venv / "bin" / "python"), str(wheel)])
    project = scratch / "adopter"
    shutil.copytree(EXAMPLE, project)
    env = {**os.environ, "PATH": f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}"}
    env.pop("VIRTUAL_ENV", None)
    # init writes this repository's cut-off as the integration tests' adopter does, so the lock has the same
    # pins and the image its dependency layers from .ci/run's earlier steps.
    cutoff = tomllib.loads((REPO / "matrix.toml").read_text())["exclude-newer"]
    env["SOURCE_DATE_EPOCH"] = str(int(cutoff.timestamp()))
    # The runners here are this machine, so the workflow installs the wheel from its path (on GitHub: a release
    # or a commit; from a local wheel, init alone would leave the spec for the user to fill).
    proc.run(["torchyard", "init", "--torchyard-spec", f"torchyard @ {wheel.as_uri()}"], cwd=project, env=env)
    # `init` writes files a plain write would give: 0666 less the umask (it wrote 0600 before issue 44).
    umask = os.umask(0)
    os.umask(umask)
    for name in ("matrix.toml", "noxfile.py", ".github/workflows/torchyard.yml", ".gitignore"):
        mode = (project / name).stat().st_mode & 0o777
        if mode != 0o666 & ~umask:
            raise SystemExit(f"torchyard init wrote {name} with mode {mode:o}")
    # The export suite only, without the built-in corpus (init leaves it out already: the example has cases).
    matrix = project / "matrix.toml"
    cheap = re.sub(r"\nsuites = \[[^]]*\]\n", '\nsuites = ["export"]\n', matrix.read_text())
    matrix.write_text(re.sub(r"\nbuiltin-cases = \w+\n", "\nbuiltin-cases = false\n", cheap))
    proc.run(["torchyard", "lock"], cwd=project, env=env)
    return project, venv


def edit_matrix(repo: Path, scenario: Scenario) -> None:
    """The default branch's matrix.toml, made cheap: the cpu entry runs the export suite only."""
    matrix = repo / "matrix.toml"
    text = matrix.read_text()
    if scenario.repository == "torchyard":
        text = text.replace(
            'name = "cpu"\naccelerator = "cpu"\n', 'name = "cpu"\naccelerator = "cpu"\nsuites = ["export"]\n'
        )
    if scenario.cpu_runner == "self-hosted":
        text = text.replace('runs-on = ["ubuntu-24.04"]', 'runs-on = ["self-hosted", "linux", "x64"]', 1)
    matrix.write_text(text)


@dataclass(frozen=True)
class Repositories:
    work: Path  # the work tree act runs in (its HEAD is the event's commit)
    origin: Path  # the bare origin the stand-in checkout fetches from
    base: str  # the default branch's commit
    head: str  # the branch's commit


def repositories(scratch: Path, scenario: Scenario, adopter_project: Path | None, before: str = "") -> Repositories:
    work, origin = scratch / "work", scratch / "origin.git"
    if adopter_project is not None:
        shutil.copytree(adopter_project, work)
    else:
        snapshot(work, before)
    edit_matrix(work, scenario)
    git(work, "init", "--quiet", f"--initial-branch={DEFAULT_BRANCH}")
    git(work, "add", "--all")
    git(work, "commit", "--quiet", "--message", "the default branch")
    base = git(work, "rev-parse", "HEAD")
    if scenario.branch != DEFAULT_BRANCH:
        git(work, "checkout", "--quiet", "-b", scenario.branch)
        if scenario.change == "docs":
            with (work / "README.md").open("a") as readme:
                readme.write("\nA line from a pull request.\n")
        elif scenario.change == "model":
            policy = work / "src" / "robopolicy" / "policy.py"
            layer = "nn.Linear(64, 64))"
            policy.write_text(policy.read_text().replace(layer, "nn.Linear(64, 64), nn.GELU(), nn.Linear(64, 64))", 1))
        elif scenario.change == "broken-matrix":
            matrix = work / "matrix.toml"
            matrix.write_text(matrix.read_text().replace('suites = ["export"]', 'suites = ["exports"]', 1))
        git(work, "commit", "--quiet", "--all", "--message", f"the branch: {scenario.change}")
    head = git(work, "rev-parse", "HEAD")
    proc.run(["git", "clone", "--quiet", "--bare", str(work), str(origin)])
    git(origin, "config", "uploadpack.allowAnySHA1InWant", "true")
    if scenario.event != "push":
        git(work, "checkout", "--quiet", "--detach", base)
        git(work, "merge", "--quiet", "--no-ff", "--message", "the pull request, merged", head)
        merge = git(work, "rev-parse", "HEAD")
        git(work, "push", "--quiet", str(origin), f"{head}:refs/pull/{PULL_REQUEST}/head")
        git(work, "push", "--quiet", str(origin), f"{merge}:refs/pull/{PULL_REQUEST}/merge")
        # The event's commit: the merge for pull_request, the base for pull_request_target.
        git(work, "checkout", "--quiet", "--detach", merge if scenario.event == "pull_request" else base)
    git(work, "remote", "add", "origin", f"https://github.com/{OWNERS[scenario.repository]}")
    return Repositories(work=work, origin=origin, base=base, head=head)


def event(scenario: Scenario, repos: Repositories) -> dict[str, object]:
    owner, name = OWNERS[scenario.repository].split("/")
    repository = {
        "name": name,
        "full_name": f"{owner}/{name}",
        "owner": {"login": owner},
        "default_branch": DEFAULT_BRANCH,
    }
    if scenario.event == "push":
        sha = repos.head
        return {"ref": f"refs/heads/{scenario.branch}", "before": repos.base, "after": sha, "repository": repository}
    return {
        "action": "synchronize",
        "number": PULL_REQUEST,
        "pull_request": {
            "number": PULL_REQUEST,
            "head": {"ref": scenario.branch, "sha": repos.head, "repo": repository},
            "base": {"ref": DEFAULT_BRANCH, "sha": repos.base, "repo": repository},
        },
        "repository": repository,
    }


def free_port() -> int:
    """A port for this run's artifact server (act's default one may be taken by another act on the machine)."""
    with socket.socket() as probe:
        probe.bind(("", 0))
        return int(probe.getsockname()[1])


def act_command(scenario: Scenario, repos: Repositories, scratch: Path) -> list[str]:
    event_file = scratch / "event.json"
    event_file.write_text(json.dumps(event(scenario, repos)))
    # Found on this session's PATH: the runners' environment (act_env) leaves the session's venv out.
    command = [
        shutil.which("act") or "act",
        scenario.event,
        "--workflows",
        scenario.workflow,
        "--eventpath",
        str(event_file),
    ]
    # --verbose: act logs a job its `if:` skipped only at debug level.
    command += ["--directory", str(repos.work), "--json", "--verbose", "--no-skip-checkout", "--action-offline-mode"]
    command += ["--pull=false", "--no-cache-server", f"--artifact-server-path={scratch / 'artifacts'}"]
    command += [f"--artifact-server-port={free_port()}"]
    command += [f"--platform={label}=-self-hosted" for label in LABELS]
    command += [f"--matrix=name:{ENTRY}", *stand_ins(repos.work / scenario.workflow)]
    command += [f"--var={key}={value}" for key, value in scenario.variables.items()]
    command += [f"--env={key}={value}" for key, value in scenario.env.items()]
    # The earlier runs of this invocation, for action-download-artifact's stand-in (GitHub's runs API).
    command += [f"--env={RECORDED_RUNS}={recorded_runs(scratch)}"]
    if scenario.job:
        command += ["--job", scenario.job]
    return command


def act_env(scenario: Scenario, repos: Repositories, venv: Path | None) -> dict[str, str]:
    """This machine's environment (a self-hosted runner's), less this session's venv; git fetches from
    github.com/<owner>/<name> reach the bare origin."""
    env = {key: value for key, value in os.environ.items() if key not in {"VIRTUAL_ENV", "PYTEST_ADDOPTS"}}
    session_bin = str(Path(sys.executable).parent)
    env["PATH"] = os.pathsep.join(p for p in env["PATH"].split(os.pathsep) if p != session_bin)
    env |= {
        "GIT_CONFIG_COUNT": "1",
        "GIT_CONFIG_KEY_0": f"url.file://{repos.origin}.insteadOf",
        "GIT_CONFIG_VALUE_0": f"https://github.com/{OWNERS[scenario.repository]}",
    }
    return env


RECORDED_RUNS = "ACT_RECORDED_RUNS"


def recorded_runs(scratch: Path) -> Path:
    """The runs every scenario of this invocation finished, a JSON line each (its scratch folder's parent)."""
    return scratch.parent / "runs.jsonl"


def record_run(scenario: Scenario, repos: Repositories, result: Outcome, scratch: Path) -> None:
    """This run as GitHub's runs API lists it (repository, workflow, branch, event, conclusion), with where act's
    artifact server kept its artifacts: the next scenarios' runs find it as they would on GitHub."""
    stored = sorted((scratch / "artifacts").glob("*"))  # act's artifact server: a folder per run id (one here)
    runs = stored[0] if stored else scratch / "artifacts" / "none"
    named = re.search(r"(?m)^name: *(.+?) *$", (repos.work / scenario.workflow).read_text())
    failed = any(results - {"success", "skipped"} for results in result.results.values())
    record = {
        "repository": OWNERS[scenario.repository],
        "workflow": Path(scenario.workflow).name,
        "name": named[1] if named else scenario.workflow,
        "branch": scenario.branch,
        "event": scenario.event,
        "conclusion": "failure" if failed else "success",
        "artifacts": str(runs),
    }
    with recorded_runs(scratch).open("a") as stream:
        stream.write(json.dumps(record) + "\n")


@dataclass(frozen=True)
class Outcome:
    results: dict[str, set[str]]  # job id -> results of its jobs (a matrix has several)
    seconds: dict[str, float]  # job name -> wall time
    log: str
    summary: str = ""  # what the steps wrote to $GITHUB_STEP_SUMMARY (act logs each as a `summary` record)


def outcome(lines: Sequence[str]) -> Outcome:
    results: dict[str, set[str]] = {}
    first: dict[str, float] = {}
    last: dict[str, float] = {}
    text, summaries = [], []
    for line in lines:
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            text.append(line)
            continue
        text.append(str(record.get("msg", "")))
        if record.get("command") == "summary":
            summaries.append(str(record.get("content", "")))
        job, job_id = str(record.get("job", "")), str(record.get("jobID", ""))
        if "jobResult" in record and job_id:
            results.setdefault(job_id, set()).add(str(record["jobResult"]))
        stamp = str(record.get("time", ""))
        if job and stamp:
            moment = time.mktime(time.strptime(stamp[:19], "%Y-%m-%dT%H:%M:%S"))
            first.setdefault(job, moment)
            last[job] = moment
    seconds = {job: last[job] - first[job] for job in first}
    return Outcome(results=results, seconds=seconds, log="\n".join(text), summary="\n".join(summaries))


def artifacts(scratch: Path) -> dict[str, Path]:
    """The run's artifacts on act's artifact server, by name (one run, id 1)."""
    runs = scratch / "artifacts"
    return {path.name: path for run in runs.glob("*") for path in run.iterdir()} if runs.is_dir() else {}


def problems(scenario: Scenario, result: Outcome, scratch: Path) -> Iterator[str]:
    expect = scenario.expect
    for wanted, jobs in (("success", expect.succeeded), ("failure", expect.failed), ("skipped", expect.skipped)):
        for job in sorted(jobs):
            got = result.results.get(job, {"not started"})
            if got != {wanted}:
                yield f"job {job}: expected {wanted}, got {', '.join(sorted(got))}"
    found = artifacts(scratch)
    for name, files in expect.artifacts.items():
        if name not in found:
            yield f"artifact {name}: missing (artifacts: {', '.join(sorted(found)) or 'none'})"
            continue
        absent = [file for file in files if not (found[name] / file).is_file()]
        if absent:
            yield f"artifact {name}: no {', '.join(absent)}"
    for name, trust in expect.trust.items():
        env_json = found.get(name, scratch / "none") / "env.json"
        stamped = json.loads(env_json.read_text()).get("trust") if env_json.is_file() else None
        if stamped != trust:
            yield f"artifact {name}: env.json trust {stamped!r}, expected {trust!r}"
    for text in expect.log:
        if text not in result.log:
            yield f"the log lacks {text!r}"
    for text in expect.not_in_log:
        if text in result.log:
            yield f"the log has {text!r}"
    for text in expect.summary:
        if text not in result.summary:
            yield f"the step summaries lack {text!r}"


def run(
    scenario: Scenario, scratch: Path, adopter_project: Path | None, venv: Path | None, before: str = ""
) -> list[str]:
    """The run's problems (none: it passed). With `before`, a run that shows no problem is the problem: the
    earlier workflows must fail the checks their fixes made pass."""
    repos = repositories(scratch, scenario, adopter_project, before)
    command = act_command(scenario, repos, scratch)
    started = time.monotonic()
    completed = proc.run(command, env=act_env(scenario, repos, venv), capture=True, check=False)
    lines = (completed.stdout + completed.stderr).splitlines()
    (scratch / "act.log").write_text("\n".join(lines) + "\n")
    result = outcome(lines)
    record_run(scenario, repos, result, scratch)
    found = list(problems(scenario, result, scratch))
    jobs = ", ".join(f"{job} {seconds:.0f} s" for job, seconds in sorted(result.seconds.items()))
    verdict = "ok" if not found else "FAILED"
    if before:
        verdict = f"failed with the workflows of {before}, as it should" if found else f"PASSED with {before}"
    print(f"{scenario.name}: {verdict} in {time.monotonic() - started:.0f} s ({jobs})", file=sys.stderr)
    for problem in found:
        print(f"  {scenario.name}: {problem}", file=sys.stderr)
    if found:
        print(f"  the log: {scratch / 'act.log'}", file=sys.stderr)
    return found


def main(argv: Sequence[str] | None = None, environ: Mapping[str, str] = os.environ) -> int:
    parser = argparse.ArgumentParser(prog="nox -s workflows", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--only", action="append", default=[],
        help="a scenario's name (repeatable; adopter-pull-request downloads what adopter-push-main uploads)",
    )  # fmt: skip
    parser.add_argument("--keep", action="store_true", help="keep the scratch folder")
    parser.add_argument("--ci", action="store_true", help="the scenarios .ci/run runs (ci = True)")
    parser.add_argument(
        "--before", default="", metavar="REV", help="run with REV's workflow files: each chosen run must fail"
    )
    args = parser.parse_args(argv)
    chosen = [s for s in SCENARIOS if (not args.only or s.name in args.only) and (s.ci or not args.ci)]
    if not chosen:
        parser.error(f"no scenario named {', '.join(args.only)}: {', '.join(s.name for s in SCENARIOS)}")
    root = Path(tempfile.mkdtemp(prefix="torchyard-workflows-", dir=environ.get("TMPDIR")))
    failed = []
    if CPU_WHEELS in environ:  # init's matrix asks PyTorch's CPU index first: served as the integration tests do
        os.environ["TORCHYARD_MIRRORS"] = mirrored(environ, root / "pytorch-cpu")["TORCHYARD_MIRRORS"]
    try:
        adopter_project, venv = (None, None)
        if any(s.repository == "adopter" for s in chosen):
            adopter_project, venv = adopter(root / "adopter-base", args.before)
        for scenario in chosen:
            scratch = root / scenario.name
            scratch.mkdir()
            own = adopter_project if scenario.repository == "adopter" else None
            if bool(run(scenario, scratch, own, venv, args.before)) != bool(args.before):
                failed.append(scenario.name)
    finally:
        if args.keep or failed:
            print(f"scratch: {root}", file=sys.stderr)
        else:
            shutil.rmtree(root, ignore_errors=True)
    if failed:
        outcome = f"passed with {args.before}" if args.before else "failed"
        print(f"workflows: {len(failed)} of {len(chosen)} runs {outcome}: {', '.join(failed)}", file=sys.stderr)
        return 1
    outcome = f"failed with {args.before}'s workflows, as they should" if args.before else "passed"
    print(f"workflows: {len(chosen)} runs {outcome}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
