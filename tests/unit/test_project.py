"""An entry's `project`: read from the adopter's pyproject, its dependencies in the lock inputs, its
source (git-tracked minus .dockerignore) in the build plan, and pointed errors for every mistake."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.unit.matrix_text import VALID
from torchyard.errors import ConfigError, ImageBuildError
from torchyard.image.context import project_files, select
from torchyard.image.plan import BuildPlan, plan_build
from torchyard.image.source import ProjectFile
from torchyard.lock.check import lock_freshness
from torchyard.lock.inputs import LockInputs, requirements_in
from torchyard.lock.lockfile import lock_path, render_lockfile
from torchyard.matrix import Entry, load_plan

PYPROJECT = """\
[project]
name = "Robo_Policy"
version = "0.1.0"
dependencies = ["torch>=2.9", "numpy"]

[project.optional-dependencies]
sim = ["mujoco>=3"]

[dependency-groups]
test = ["pytest>=8", {include-group = "lint"}, "robo-policy[sim]"]
lint = ["ruff"]
"""

ENTRY = """
[[entry]]
name = "policy"
accelerator = "cpu"
python = "3.11"
requirements = ["pytest>=8"]
project = {project}
tests = {tests}
"""


def project_tree(root: Path, pyproject: str = PYPROJECT) -> Path:
    (root / "src" / "robo_policy").mkdir(parents=True)
    (root / "src" / "robo_policy" / "__init__.py").write_text("VALUE = 1\n")
    (root / "tests").mkdir()
    (root / "tests" / "test_it.py").write_text("def test_it():\n    pass\n")
    (root / "notes").mkdir()
    (root / "notes" / "draft.log").write_text("private\n")
    (root / ".dockerignore").write_text("notes/\n*.log\n!keep.log\n")
    (root / "keep.log").write_text("kept\n")
    (root / "pyproject.toml").write_text(pyproject)
    return root


def load(root: Path, project: str = '{ path = ".", extras = ["sim"], groups = ["test"] }', tests: str = '["tests"]'):  # type: ignore[no-untyped-def]
    (root / "matrix.toml").write_text(VALID + ENTRY.format(project=project, tests=tests))
    return load_plan(root / "matrix.toml").entry("policy")


def error_of(root: Path, **changes: str) -> str:
    with pytest.raises(ConfigError) as caught:
        load(root, **changes)
    assert "\n" not in str(caught.value)
    return str(caught.value)


def test_project_dependencies_extras_and_groups_join_the_lock_inputs(tmp_path: Path) -> None:
    entry = load(project_tree(tmp_path))
    assert entry.project is not None and entry.project.name == "robo-policy"
    # The project's own extra (robo-policy[sim]) is the project: only its other requirements are locked.
    assert entry.project.requirements == ("torch>=2.9", "numpy", "mujoco>=3", "pytest>=8", "ruff")
    inputs = LockInputs.of(entry, "0.13.9")
    assert inputs.record()["project"] == list(entry.project.requirements)
    assert "mujoco>=3\n" in requirements_in(inputs, [])


def test_a_project_dependency_change_makes_the_lock_stale_naming_it(tmp_path: Path) -> None:
    root = project_tree(tmp_path)
    entry = load(root)
    lockdir = tmp_path / "lockfiles"
    lock_path(lockdir, entry).parent.mkdir()
    lock_path(lockdir, entry).write_text(render_lockfile(entry, LockInputs.of(entry, "0.13.9"), "numpy==2.0\n"))
    assert lock_freshness(entry, lockdir, "0.13.9").status == "fresh"
    (root / "pyproject.toml").write_text(PYPROJECT.replace('"numpy"', '"numpy<2"'))
    stale = lock_freshness(load(root), lockdir, "0.13.9")
    assert (stale.status, stale.detail) == ("stale", "inputs changed: project")


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"project": '"missing"'}, 'entry "policy" > project: expected a folder holding pyproject.toml'),
        (
            {"project": '{ path = ".", extras = ["simm"] }'},
            "no optional dependency group (extra) 'simm'; did you mean 'sim'?",
        ),
        ({"project": '{ path = ".", groups = ["tset"] }'}, "no dependency group 'tset'; did you mean 'test'?"),
        ({"project": '{ path = ".", extra = ["sim"] }'}, "project > extra: unknown key; did you mean 'extras'?"),
        ({"tests": '["tests/nope"]'}, "the entry's tests path 'tests/nope' does not exist"),
    ],
)
def test_project_mistakes_are_one_pointed_line(tmp_path: Path, changes: dict[str, str], expected: str) -> None:
    assert expected in error_of(project_tree(tmp_path), **changes)


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"project": '"/"'}, 'entry "policy" > project: expected a path inside the project\'s checkout, got "/"'),
        ({"project": '"../victim"'}, 'entry "policy" > project: expected a path inside the project\'s checkout'),
        ({"project": '{ path = "src/../.." }'}, "project > path: expected a path inside the project's checkout"),
        ({"tests": '["/etc"]'}, 'entry "policy" > tests[0]: expected a path inside the project\'s checkout'),
        (
            {"tests": '["tests", "../notes"]'},
            'entry "policy" > tests[1]: expected a path inside the project\'s checkout',
        ),
        ({"project": '"linked"'}, 'entry "policy" > project: "linked" goes through a symbolic link'),
        ({"tests": '["linked-tests/x"]'}, 'entry "policy" > tests[0]: "linked-tests/x" goes through a symbolic link'),
    ],
)
def test_a_path_the_host_reads_stays_in_the_checkout(tmp_path: Path, changes: dict[str, str], expected: str) -> None:
    """A pull request's matrix.toml names the project and its tests; the host reads what they name."""
    root = project_tree(tmp_path / "checkout")
    (tmp_path / "victim").mkdir()
    (tmp_path / "victim" / "pyproject.toml").write_text(PYPROJECT)
    (tmp_path / "victim" / "x").mkdir()
    (root / "linked").symlink_to(tmp_path / "victim")
    (root / "linked-tests").symlink_to(tmp_path / "victim")
    assert expected in error_of(root, **changes)


def test_tests_without_a_project_are_refused(tmp_path: Path) -> None:
    (tmp_path / "matrix.toml").write_text(
        VALID.replace('requirements = ["torch==2.14.*", "pytest"]', 'requirements = ["torch"]\ntests = ["t"]', 1)
    )
    with pytest.raises(ConfigError, match=r'entry "cpu" > tests: needs `project`'):
        load_plan(tmp_path / "matrix.toml")


def test_dynamic_dependencies_cannot_be_locked(tmp_path: Path) -> None:
    root = project_tree(tmp_path, '[project]\nname = "x"\nversion = "1"\ndynamic = ["dependencies"]\n')
    assert "project.dynamic lists dependencies" in error_of(root, project='"."')


@pytest.mark.real_subprocess
def test_project_source_is_what_git_tracks_minus_dockerignore(tmp_path: Path) -> None:
    root = project_tree(tmp_path)
    subprocess.run(["git", "init", "--quiet", str(root)], check=True)
    subprocess.run(["git", "-C", str(root), "add", "--force", "."], check=True)
    (root / "src" / "robo_policy" / "new.py").write_text("NEW = 1\n")  # untracked, not ignored: part of it
    files = project_files(root)
    assert [item.path for item in files] == [
        ".dockerignore", "keep.log", "pyproject.toml", "src/robo_policy/__init__.py", "src/robo_policy/new.py",
        "tests/test_it.py",
    ]  # fmt: skip
    assert [item.path for item in select(files, ["tests", "pyproject.toml"])] == ["pyproject.toml", "tests/test_it.py"]


def planner(root: Path, lockdir: Path) -> Callable[[], BuildPlan]:
    """The plan of `root`'s entry, its files added to a fresh git index."""
    entry: Entry = load(root)
    lockdir.mkdir()
    lock_path(lockdir, entry).write_text("# lock\n")
    subprocess.run(["git", "init", "--quiet", str(root)], check=True)
    subprocess.run(["git", "-C", str(root), "add", "."], check=True)
    return lambda: plan_build(
        entry, lockdir, base_image="b", base_id="i", uv_version="0.13.9", revision="r", source_date_epoch="0"
    )


@pytest.mark.real_subprocess
def test_build_plan_carries_the_tests_and_is_keyed_by_the_source(tmp_path: Path) -> None:
    root = project_tree(tmp_path)
    planned = planner(root, tmp_path / "lockfiles")

    def plan() -> tuple[str, dict[str, bytes]]:
        built = planned()
        assert built.project_root == root
        return built.tag, {f"workspace/{item.path}": item.data for item in built.workspace}

    first, context = plan()
    assert "workspace/tests/test_it.py" in context and "workspace/pyproject.toml" in context
    assert not any("src/robo_policy" in name or "notes" in name for name in context)
    (root / "src" / "robo_policy" / "__init__.py").write_text("VALUE = 2\n")
    assert plan()[0] != first
    (root / "notes" / "draft.log").write_text("ignored by .dockerignore\n")
    second = plan()[0]
    (root / "notes" / "draft.log").write_text("changed again, still ignored\n")
    assert plan()[0] == second


@pytest.mark.real_subprocess
def test_a_committed_link_is_planned_as_a_link_and_its_target_never_read(tmp_path: Path) -> None:
    root = project_tree(tmp_path / "project")
    secret = tmp_path / "id_rsa"
    secret.write_text("the runner's key\n")
    (root / "tests" / "key").symlink_to(secret)
    plan = planner(root, tmp_path / "lockfiles")
    first = plan()
    assert ProjectFile("tests/key", "link", str(secret).encode()) in first.workspace
    assert not any(b"runner's key" in item.data for item in (*first.workspace, *first.project_files))
    secret.write_text("another key\n")
    assert plan().tag == first.tag


def test_a_project_requirement_that_is_not_pep_508_is_one_line(tmp_path: Path) -> None:
    root = project_tree(tmp_path, PYPROJECT.replace('"numpy"', '"numpy >>= 2"'))
    assert "pyproject.toml: not a PEP 508 requirement: 'numpy >>= 2'" in error_of(root)


@pytest.mark.real_subprocess
def test_an_option_as_a_build_requirement_stops_the_plan_before_any_container(tmp_path: Path) -> None:
    hostile = '[build-system]\nrequires = ["--no-binary", "evilb", "--find-links", "http://host/", "evilb"]\n'
    plan = planner(project_tree(tmp_path / "project", PYPROJECT + hostile), tmp_path / "lockfiles")
    with pytest.raises(ImageBuildError, match=r"requires item '--no-binary' is an option, not a requirement"):
        plan()


def test_a_linked_pyproject_is_never_read(tmp_path: Path) -> None:
    root = project_tree(tmp_path / "checkout")
    (tmp_path / "host.toml").write_text(PYPROJECT)
    (root / "pyproject.toml").unlink()
    (root / "pyproject.toml").symlink_to(tmp_path / "host.toml")
    assert error_of(root, project='"."').endswith(
        "pyproject.toml: is a symbolic link; a project's pyproject.toml is a file it holds"
    )
