"""The self-tests, proven once per stack (`proofs`): the entry point three times over the same inputs. A
self-test that passed is left out of the next run, which says so; one that failed runs again until it passes;
a project's test marked `harness` always runs; `--torchyard-rerun-self-tests` runs them all."""

from __future__ import annotations

import ast
import json
import os
import shutil
import site as site_module
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from torchyard import contract
from torchyard.inimage import SELFTESTS_DIR
from torchyard.inimage.selftests.beside import whole_run_environment
from torchyard.inimage.selftests.whole_runs import OWN_SETTINGS
from torchyard.inimage.start import proofs

pytestmark = pytest.mark.harness

SELF_TESTS = """
import os
from pathlib import Path

import pytest

pytestmark = pytest.mark.harness


def ran(name):
    with Path(os.environ["RUNS"]).open("a") as runs:
        runs.write(name + "\\n")


def test_steady():
    ran("steady")


def test_failing_once():
    ran("failing_once")
    assert os.environ["FAIL"] == "0"


@pytest.mark.harness("ops")
def test_of_the_ops_suite():
    ran("ops")


@pytest.mark.harness(this_run=True)
def test_of_this_run():
    ran("this_run")


@pytest.mark.harness("ops")
@pytest.mark.harness(this_run=True)
def test_of_this_run_of_the_ops_suite():
    ran("ops_this_run")
"""

PROJECT = """
import os
from pathlib import Path

import pytest


@pytest.mark.harness
def test_projects_own():
    with Path(os.environ["RUNS"]).open("a") as runs:
        runs.write("project\\n")


@pytest.mark.export
def test_plain():
    pass
"""

# A plugin in every process of the run (xdist hands `-p` to its workers): these runs' self-tests stand in for
# torchyard's own.
STAND_IN = """
import os
from pathlib import Path

from torchyard.inimage.start import proofs

proofs._TESTS = (Path(os.environ["STAND_IN_SUITES"]).resolve(),)
"""


Seen = tuple[int, list[str], str, dict[str, object]]


def runs_of(workdir: Path, runs: list[tuple[str, list[str]]]) -> list[Seen]:
    """The entry point once per (FAIL, arguments) in `runs`, over the same self-tests, project and cache: each
    run's status, the tests it ran, parity.md's self-test line and parity.json's `self-tests`."""
    suites, project, ran = workdir / "suites", workdir / "project", workdir / "runs"
    suites.mkdir()
    project.mkdir()
    (suites / "test_self.py").write_text(SELF_TESTS)
    (workdir / "stand_in_suites.py").write_text(STAND_IN)
    (project / "test_project.py").write_text(PROJECT)
    # A project's conftest: pytest then calls hooks on a subset of its plugins (pluggy keeps them in sets).
    (project / "conftest.py").write_text("")
    # Its configuration makes it the rootdir, as an adopter's is: the self-tests' files lie outside it.
    (project / "pyproject.toml").write_text("[tool.pytest.ini_options]\n")
    # The run's own settings left out, as a whole run's are, but its suites: export, which the project's one
    # test is in (each suite of a run must pass a test), so that the ops suite's self-test is left out.
    dropped = {*OWN_SETTINGS, contract.REUSE_RESULTS}  # and never a replay: the runs differ only by FAIL
    inherited = {name: value for name, value in whole_run_environment(os.environ).items() if name not in dropped}
    env = inherited | {
        contract.ACCELERATOR: "cpu",
        contract.SUITES: "export",
        contract.REPORT_DIR: str(workdir / "reports"),
        contract.INDUCTOR_CACHE: str(workdir / "cache"),  # the proofs are under it: these runs' own
        "RUNS": str(ran),
        "STAND_IN_SUITES": str(suites),
        "PYTHONPATH": os.pathsep.join(
            [str(workdir), str(Path(contract.__file__).resolve().parents[1]), os.environ.get("PYTHONPATH", "")]
        ),
    }
    argv = [str(suites), str(project), "-p", "stand_in_suites", "-p", contract.PLUGIN, "-p", "no:cacheprovider"]
    argv += ["-m", "harness or export"]
    argv.append(f"--junitxml={workdir / 'reports' / contract.JUNIT}")
    seen = []
    for fail, extra in runs:
        ran.write_text("")
        command = [sys.executable, "-m", "torchyard.inimage", *argv, *extra]
        completed = subprocess.run(
            command, env={**env, "FAIL": fail}, cwd=workdir, capture_output=True, text=True, check=False
        )
        markdown = (workdir / "reports" / contract.PARITY_MARKDOWN).read_text()
        line = next((line for line in markdown.splitlines() if line.startswith("Harness self-tests")), "")
        written = json.loads((workdir / "reports" / contract.PARITY_JSON).read_text())
        said = {**written.get("self-tests", {}), "pytest-tests": written.get("pytest-tests")}
        seen.append((completed.returncode, sorted(ran.read_text().split()), line, said))
    return seen


def three_runs(workdir: Path) -> list[Seen]:
    """A run in which one self-test fails, one in which it passes, one with every self-test run again; with no
    xdist workers (-n 0: nor a fork server, which these runs' tests never use)."""
    return runs_of(workdir, [("1", ["-n", "0"]), ("0", ["-n", "0"]), ("0", ["-n", "0", proofs.RERUN_OPTION])])


def under_workers(workdir: Path) -> list[Seen]:
    """Two passing runs with an xdist worker: the controller collects nothing, the worker everything."""
    return runs_of(workdir, [("0", ["-n", "1"]), ("0", ["-n", "1"])])


OTHER_SUITES = "; 2 left out, of suites this run does not have (ops)."


@pytest.mark.beside.with_args(three_runs)
def test_a_self_test_that_passed_is_left_out_until_asked_for(beside: list[Seen]) -> None:
    failing, passing, rerun = beside
    assert failing[:2] == (1, ["failing_once", "project", "steady", "this_run"])
    assert failing[2] == (
        "Harness self-tests: 3 ran, 1 failed, which fails the run (`test_self.py::test_failing_once`; "
        f"junit.xml has each one's traceback){OTHER_SUITES}"
    )
    assert failing[3]["failed-tests"] == ["test_self.py::test_failing_once"]
    # What pytest counts: these 3, and the project's 2 (one marked harness, in the project: not a self-test).
    assert failing[3]["pytest-tests"] == {"with-results": 0, "self-tests": 3, "others": 2}
    # The steady one proven; the project's never, nor the one that checks the run itself.
    assert passing[:2] == (0, ["failing_once", "project", "this_run"])
    assert passing[2].startswith("Harness self-tests: 2 ran; 1 left out, proven on this stack by the run of ")
    assert passing[2].endswith(OTHER_SUITES)
    assert passing[3]["left-out"] == 1 and passing[3]["failed"] == 0
    assert passing[3]["other-suites"] == {"left-out": 2, "suites": ["ops"]}
    assert rerun[:2] == (0, ["failing_once", "project", "steady", "this_run"])
    assert rerun[2] == f"Harness self-tests: 3 ran{OTHER_SUITES}"


@pytest.mark.beside.with_args(under_workers)
def test_what_the_workers_left_out_is_in_the_controllers_reports(beside: list[Seen]) -> None:
    first, second = beside
    assert first[:2] == (0, ["failing_once", "project", "steady", "this_run"])
    assert first[3]["other-suites"] == {"left-out": 2, "suites": ["ops"]} and first[3]["left-out"] == 0
    assert first[3]["pytest-tests"] == {"with-results": 0, "self-tests": 3, "others": 2}  # the workers' tests
    assert second[:2] == (0, ["project", "this_run"])
    assert second[3]["left-out"] == 2 and second[3]["ran"] == 1 and second[3]["proven-by"]
    assert second[2].startswith("Harness self-tests: 1 ran; 2 left out, proven on this stack by the run of ")


def path_of(env: dict[str, str], device: dict[str, str], argv: list[str]) -> Path:
    return proofs.proof_path(env, proofs.stack_key(env), device, argv)


def test_a_proof_is_kept_per_stack_device_and_workers_not_per_settings(tmp_path: Path) -> None:
    env = {contract.INDUCTOR_CACHE: str(tmp_path), contract.PRECISION: "fp32"}
    cpu = {"type": "cpu", "processor": "one"}
    first = path_of(env, cpu, ["-m", "export or harness"])
    assert first.parent == tmp_path / proofs.STORE
    assert first == path_of(env, cpu, ["-m", "harness", proofs.RERUN_OPTION])  # the selection is not in it
    assert first == path_of({**env, contract.CASES: "my_cases"}, cpu, [])  # nor the project's cases
    # Nor the entry's settings: cpu and cpu-bf16 of one stack share it.
    assert first == path_of({**env, contract.PRECISION: "bf16", contract.SUITES: "train"}, cpu, [])
    assert first == path_of(env, cpu, ["--torchyard-precision=bf16"])
    assert first != path_of(env, {**cpu, "processor": "two"}, [])
    assert first != path_of(env, cpu, ["-n", "2"])
    assert first == path_of({**env, contract.IMAGE_ID: "sha256:other"}, cpu, [])  # the project's layers
    stacked = {**env, contract.STACK: "sha256:base torch=1 rest=2"}
    assert first != path_of(stacked, cpu, [])  # the base
    assert path_of(stacked, cpu, []) != path_of({**stacked, contract.STACK: "sha256:other torch=1 rest=2"}, cpu, [])
    # the lock's layers by what the self-tests exercise of them (`exercised`), not by their keys
    assert path_of(stacked, cpu, []) == path_of({**stacked, contract.STACK: "sha256:base torch=1 rest=3"}, cpu, [])
    # the build arguments and installer below the lock (the compiler inductor uses), chained into the first key
    assert path_of(stacked, cpu, []) != path_of({**stacked, contract.STACK: "sha256:base torch=2 rest=2"}, cpu, [])
    # what of the environment changes the stack or how Python and pytest start
    for variable in ("TORCHDYNAMO_DISABLE", "PYTHONPATH", "PYTEST_PLUGINS", "TORCH_DEVICE_BACKEND_AUTOLOAD"):
        assert path_of(env, cpu, []) != path_of({**env, variable: "1"}, cpu, []), variable
    assert not proofs.likely_proven(env, proofs.stack_key(env), [])
    first.parent.mkdir()
    first.write_text("{}")
    assert proofs.likely_proven(env, proofs.stack_key(env), []) and not proofs.likely_proven(
        env, proofs.stack_key(env), [proofs.RERUN_OPTION]
    )


# Fixtures that hand a test the run's own settings or selection, and what reads the run's collected tests.
RUNS_OWN = {"evaluations", "case", "parity_backend", "compile_backend", "train_backend"}


def _session_items(node: ast.AST) -> bool:
    """`<something>.session.items`: the run's collected tests."""
    return isinstance(node, ast.Attribute) and node.attr == "items" and ast.unparse(node.value).endswith("session")


def _installed(
    site: Path,
    name: str,
    version: str,
    requires: tuple[str, ...] = (),
    *,
    plugin: str = "",
    files: tuple[str, ...] = (),
) -> None:
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    lines = [f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n", *(f"Requires-Dist: {r}\n" for r in requires)]
    (info / "METADATA").write_text("".join(lines))
    (info / "RECORD").write_text("".join(f"{path},,\n" for path in files))
    if plugin:
        (info / "entry_points.txt").write_text(f"[{plugin}]\n{name} = {name.replace('-', '_')}\n")


def _upgraded(site: Path, name: str, old: str, new: str, files: tuple[str, ...]) -> None:
    shutil.rmtree(site / f"{name}-{old}.dist-info")
    _installed(site, name, new, files=files)


def test_a_proof_holds_for_what_the_self_tests_exercise_not_the_whole_stack(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 58: a project that adds a dependency keeps its proof (the first run on a new stack ran about 270
    self-tests for minutes on CPU); a version the harness imports, or one they require, moves it, and so do a
    pytest plugin, a device backend torch loads, and what Python runs as it starts (`.pth` files, `sitecustomize`,
    and the version of the distribution that ships them: a `.pth` whose module changes), in every process."""
    site = tmp_path / "site"
    monkeypatch.syspath_prepend(str(site))  # found first: these shadow the installed ones
    monkeypatch.setattr(site_module, "getsitepackages", lambda: [str(site)])
    monkeypatch.setattr(site_module, "getusersitepackages", lambda: str(tmp_path / "user"))
    _installed(site, "torch", "1.0", ("numpy>=1", "filelock; python_version > '3'", "sphinx; extra == 'docs'"))
    _installed(site, "numpy", "2.0")
    before = proofs.exercised()
    assert before["versions"]["torch"] == "1.0" and before["versions"]["numpy"] == "2.0"  # type: ignore[index]
    _installed(site, "a-models-library", "1.0", ("torch",))  # only the project's models import it
    _installed(site, "sphinx", "8.0")  # a docs extra's
    assert proofs.exercised() == before
    steps: list[Callable[[], object]] = [
        lambda: _installed(site, "filelock", "3.0"),  # torch's, for this platform
        lambda: _installed(site, "opt-einsum", "3.0"),  # torch imports it where installed: einsum's order
        lambda: _installed(site, "pytest-leaky", "0.1", plugin="pytest11"),
        lambda: _installed(site, "device-backend", "0.1", plugin="torch.backends"),  # `import torch` calls it
        lambda: _installed(site, "starts", "0.1", files=("sitecustomize.py",)),
        lambda: _installed(site, "hooks", "0.1", files=("zz_hook.pth", "hookmod.py")),
        lambda: _upgraded(site, "hooks", "0.1", "0.2", files=("zz_hook.pth",)),
        lambda: (site / "patch.pth").write_text("import os\n"),
        lambda: (site / "patch.pth").write_text("import sys\n"),
    ]
    seen = [before]
    for step in steps:
        step()
        seen.append(proofs.exercised())
        assert seen[-1] != seen[-2]
    shutil.rmtree(site / "numpy-2.0.dist-info")
    _installed(site, "numpy", "2.1")
    assert proofs.exercised()["versions"]["numpy"] == "2.1"  # type: ignore[index]


def test_a_self_test_that_reads_the_run_itself_is_marked_so() -> None:
    """The proof is not keyed by the entry's settings because no kept self-test reads them: one that takes a
    fixture made of them, or reads the run's collected tests, must say `harness(this_run=True)`, which runs it
    in every run. Checked in the source of every self-test file."""
    unmarked = []
    for path in sorted(SELFTESTS_DIR.glob("test_*.py")):
        tree = ast.parse(path.read_text())
        marks = [node for node in tree.body if isinstance(node, ast.Assign) and "pytestmark" in ast.unparse(node)]
        if not any("harness" in ast.unparse(node) for node in marks):
            continue  # a suite's own tests (export, parity...), not the harness's
        for node in tree.body:
            if not (isinstance(node, ast.FunctionDef) and node.name.startswith("test_")):
                continue
            reads = {arg.arg for arg in node.args.args} & RUNS_OWN or any(_session_items(n) for n in ast.walk(node))
            this_run = any("this_run=True" in ast.unparse(decorator) for decorator in node.decorator_list)
            if reads and not this_run:
                unmarked.append(f"{path.name}::{node.name}")
    assert unmarked == []
