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


def fresh_lock(entry: Entry, lockdir: Path) -> Path:
    """`lockdir` with a lock of `entry` made from its inputs now (fresh, as the check says)."""
    lock_path(lockdir, entry).parent.mkdir()
    lock_path(lockdir, entry).write_text(render_lockfile(entry, LockInputs.of(entry, "0.13.9"), "numpy==2.0\n"))
    assert lock_freshness(entry, lockdir, "0.13.9").status == "fresh"
    return lockdir


def test_a_project_dependency_change_makes_the_lock_stale_naming_it(tmp_path: Path) -> None:
    root = project_tree(tmp_path)
    entry = load(root)
    lockdir = fresh_lock(entry, tmp_path / "lockfiles")
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


def planner(root: Path, lockdir: Path, entry: Entry | None = None) -> Callable[[], BuildPlan]:
    """The plan of `root`'s entry (the package's, unless given), its files added to a fresh git index."""
    entry = entry or load(root)
    lockdir.mkdir()
    lock_path(lockdir, entry).write_text("# lock\n")
    subprocess.run(["git", "init", "--quiet", str(root)], check=True)
    subprocess.run(["git", "-C", str(root), "add", "."], check=True)
    return lambda: plan_build(
        entry, lockdir, project="p-0123abcd4567", base_image="b", base_id="i", uv_version="0.13.9", revision="r",
        source_date_epoch="0",
    )  # fmt: skip


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


# A repository with no package (karpathy/nanoGPT's shape): modules and scripts at the top, tests, requirements.
SOURCE_ENTRY = """
[[entry]]
name = "gpt"
accelerator = "cpu"
python = "3.11"
requirements = ["torch", "pytest>=8"]
project = {project}
tests = ["tests"]
"""


def source_tree(root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "model.py").write_text("class GPT:\n    pass\n")
    (root / "train.py").write_text("from model import GPT\n")
    (root / "tests").mkdir()
    (root / "tests" / "test_model.py").write_text("from model import GPT\n\ndef test_gpt():\n    GPT()\n")
    (root / "requirements.txt").write_text(
        "# what nanoGPT's README installs\nnumpy>=1.24  # arrays\ntiktoken \\\n    >=0.5\n-r requirements-train.txt\n\n"
    )
    (root / "requirements-train.txt").write_text("datasets\nwandb ; sys_platform == 'linux'\nnumpy>=1.24\n")
    return root


def load_source_entry(root: Path, project: str = '{ source = ".", requirements-files = ["requirements.txt"] }'):  # type: ignore[no-untyped-def]
    (root / "matrix.toml").write_text(VALID + SOURCE_ENTRY.format(project=project))
    return load_plan(root / "matrix.toml").entry("gpt")


def source_error(root: Path, project: str) -> str:
    with pytest.raises(ConfigError) as caught:
        load_source_entry(root, project)
    assert "\n" not in str(caught.value)
    return str(caught.value)


def test_a_source_folder_and_its_requirements_files_join_the_lock(tmp_path: Path) -> None:
    entry = load_source_entry(source_tree(tmp_path / "nanoGPT"))
    assert entry.project is not None and (entry.project.kind, entry.project.name) == ("source", "nanogpt")
    # Comments dropped, continuations joined, the include followed, each requirement once.
    assert entry.project.requirements == ("numpy>=1.24", "tiktoken>=0.5", "datasets", 'wandb; sys_platform == "linux"')
    inputs = LockInputs.of(entry, "0.13.9")
    assert inputs.record()["project"] == list(entry.project.requirements)
    assert requirements_in(inputs, []) == "torch\npytest>=8\n" + "".join(f"{r}\n" for r in entry.project.requirements)


def test_a_requirements_file_change_makes_the_lock_stale_naming_the_project(tmp_path: Path) -> None:
    root = source_tree(tmp_path)
    entry = load_source_entry(root)
    lockdir = fresh_lock(entry, tmp_path / "lockfiles")
    (root / "requirements-train.txt").write_text("datasets\n")
    stale = lock_freshness(load_source_entry(root), lockdir, "0.13.9")
    assert (stale.status, stale.detail) == ("stale", "inputs changed: project")


def test_a_source_folder_needs_no_requirements_file_and_a_pyproject_of_tool_settings_is_no_package(
    tmp_path: Path,
) -> None:
    root = source_tree(tmp_path)
    (root / "pyproject.toml").write_text("[tool.ruff]\nline-length = 100\n")
    entry = load_source_entry(root, '{ source = "." }')
    assert entry.project is not None and entry.project.requirements == ()
    # Taken for a package, it says which route fits.
    assert 'a folder of modules with no package: `project = { source = "." }`' in source_error(root, '"."')
    (root / "pyproject.toml").unlink()
    assert "pyproject.toml: no such file (an entry's `project` is a package's folder" in source_error(root, '"."')


def test_requirements_files_join_a_packages_lock_too(tmp_path: Path) -> None:
    root = project_tree(tmp_path)
    (root / "requirements-dev.txt").write_text("hypothesis\nrobo-policy[sim]\nnumpy\n")
    entry = load(root, project='{ path = ".", requirements-files = ["requirements-dev.txt"] }', tests="[]")
    # The package itself (by any spelling) is installed from source, never locked; numpy once.
    assert entry.project is not None and entry.project.requirements == ("torch>=2.9", "numpy", "hypothesis")


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("--index-url https://evil.example/simple", "the indexes come from matrix.toml's [indexes]"),
        ("--extra-index-url=https://evil.example/simple", "the indexes come from matrix.toml's [indexes]"),
        ("-ihttps://evil.example/simple", "the indexes come from matrix.toml's [indexes]"),
        ("-f ./wheels", "the indexes come from matrix.toml's [indexes]"),
        ("-e .", "the project itself is `project`"),
        ("-c constraints.txt", "constraints are not taken"),
        ("--prefer-binary", "holds requirements and `-r` includes only"),
        ("torch==2.1.0 --hash=sha256:" + "0" * 64, "a file with hashes is a lock of its own"),
        ("./vendored/pkg", "not a PEP 508 requirement"),
        ("git+https://github.com/acme/pkg", "not a PEP 508 requirement"),
    ],
)
def test_a_requirements_file_holds_requirements_and_includes_only(tmp_path: Path, line: str, expected: str) -> None:
    root = source_tree(tmp_path)
    (root / "requirements-train.txt").write_text(f"datasets\n\n{line}\n")
    error = source_error(root, '{ source = ".", requirements-files = ["requirements.txt"] }')
    assert error.startswith("requirements-train.txt:3: ") and expected in error


@pytest.mark.parametrize(
    ("project", "include", "expected"),
    [
        ('{ source = ".", requirements-files = ["../host.txt"] }', "", "> requirements-files[0]: expected a path "),
        ('{ source = ".", requirements-files = ["/etc/hostname"] }', "", "> requirements-files[0]: expected a path "),
        ('{ source = ".", requirements-files = ["linked.txt"] }', "", '"linked.txt" goes through a symbolic link'),
        ('{ source = ".", requirements-files = ["via/r.txt"] }', "", '"via/r.txt" goes through a symbolic link'),
        ('{ source = ".", requirements-files = ["requirements.txt"] }', "-r ../host.txt", "-r: expected a path "),
        ('{ source = ".", requirements-files = ["requirements.txt"] }', "-r linked.txt", '"linked.txt" goes through'),
        ('{ source = "linked-source" }', "", 'project > source: "linked-source" goes through a symbolic link'),
        ('{ source = "../outside" }', "", "project > source: expected a path inside the project's checkout"),
    ],
)
def test_a_requirements_file_or_source_the_host_reads_stays_in_the_checkout(
    tmp_path: Path, project: str, include: str, expected: str
) -> None:
    """A pull request names them in matrix.toml, or includes one from another: the host reads what they name."""
    root = source_tree(tmp_path / "checkout")
    host = tmp_path / "host.txt"
    host.write_text("a-secret-of-the-runner\n")
    (tmp_path / "outside").mkdir()
    (root / "linked.txt").symlink_to(host)
    (root / "via").symlink_to(tmp_path)
    (root / "linked-source").symlink_to(tmp_path / "outside")
    (root / "requirements-train.txt").write_text(f"datasets\n{include}\n")
    error = source_error(root, project)
    assert expected in error and "a-secret-of-the-runner" not in error


@pytest.mark.parametrize(
    ("project", "expected"),
    [
        ('{ source = ".", path = "." }', "project > source: a project is a package (`path`) or a source folder"),
        ('{ source = ".", extras = ["sim"] }', "project > extras: a source folder has no pyproject.toml [project]"),
        ('{ source = "model.py" }', 'project > source: expected a folder, got "model.py"'),
        ('{ source = ".", requirements-files = ["missing.txt"] }', "missing.txt: cannot read it"),
    ],
)
def test_source_folder_mistakes_are_one_pointed_line(tmp_path: Path, project: str, expected: str) -> None:
    assert expected in source_error(source_tree(tmp_path), project)


def test_a_source_folders_tests_must_be_in_it_and_an_include_cycle_is_named(tmp_path: Path) -> None:
    root = source_tree(tmp_path)
    (root / "tests" / "test_model.py").unlink()
    (root / "tests").rmdir()
    assert 'entry "gpt" > tests[0]: "tests" does not exist in ' in source_error(root, '{ source = "." }')
    (root / "tests").mkdir()
    (root / "requirements-train.txt").write_text("-r requirements.txt\n")
    error = source_error(root, '{ source = ".", requirements-files = ["requirements.txt"] }')
    assert "includes requirements.txt again (requirements.txt -> requirements-train.txt -> requirements.txt)" in error


@pytest.mark.real_subprocess
def test_a_source_folder_is_the_workspace_whole_on_the_import_path_and_no_wheel(tmp_path: Path) -> None:
    root = source_tree(tmp_path / "nanoGPT")
    (root / ".dockerignore").write_text("data/\n")
    (root / "data").mkdir()
    (root / "data" / "shakespeare.txt").write_text("First Citizen:\n")
    (root / "config").mkdir()
    (root / "config" / "train_gpt2.py").write_text("batch_size = 12\n")
    # A pyproject.toml of tool settings, with a hostile build backend: a source folder builds nothing.
    (root / "pyproject.toml").write_text('[build-system]\nrequires = ["--find-links", "http://host/"]\n')
    plan = planner(root, tmp_path / "lockfiles", load_source_entry(root))
    first = plan()
    assert [item.path for item in first.workspace] == [
        ".dockerignore", "config/train_gpt2.py", "matrix.toml", "model.py", "pyproject.toml", "requirements-train.txt",
        "requirements.txt", "tests/test_model.py", "train.py",
    ]  # fmt: skip
    assert first.project_root is None and first.project_files == () and first.build_requires == ()
    assert dict(first.build_args)["WORKSPACE_ON_PATH"] == "1"
    (root / "model.py").write_text("class GPT:\n    n_layer = 12\n")
    assert plan().tag != first.tag
    (root / "data" / "shakespeare.txt").write_text("Second Citizen:\n")  # ignored by .dockerignore
    assert plan().tag == plan().tag


def test_a_package_is_not_put_on_the_import_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = project_tree(tmp_path)
    entry = load(root)
    lockdir = tmp_path / "lockfiles"
    lockdir.mkdir()
    lock_path(lockdir, entry).write_text("# lock\n")
    monkeypatch.setattr("torchyard.image.plan.project_files", lambda root, git: ())
    plan = plan_build(
        entry, lockdir, project="p-0123abcd4567", base_image="b", base_id="i", uv_version="0.13.9", revision="r",
        source_date_epoch="0",
    )  # fmt: skip
    assert dict(plan.build_args)["WORKSPACE_ON_PATH"] == "" and plan.project_root == root


def test_tests_take_node_ids_and_a_selection_as_users_write_it(tmp_path: Path) -> None:
    """Issue 58: `tests/test_model.py::test_gpt` was refused as a path that does not exist, and no key carried
    pytest's `-m` or `-k`."""
    root = source_tree(tmp_path / "nanoGPT")
    entry_text = SOURCE_ENTRY.format(project='{ source = "." }').replace(
        'tests = ["tests"]',
        'tests = ["tests/test_model.py::test_gpt", "tests/test_model.py::TestX::test_y"]\n'
        'tests-markers = "not slow"\ntests-keyword = "not dtw"',
    )
    (root / "matrix.toml").write_text(VALID + entry_text)
    entry = load_plan(root / "matrix.toml").entry("gpt")
    assert entry.tests == ("tests/test_model.py::test_gpt", "tests/test_model.py::TestX::test_y")
    assert entry.test_paths == ("tests/test_model.py",)
    assert (entry.options.tests_markers, entry.options.tests_keyword) == ("not slow", "not dtw")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ('tests = ["tests/test_gone.py::test_gpt"]', '"tests/test_gone.py" does not exist'),
        ('tests = ["tests"]\ntests-markers = "not\\nslow"', 'tests-markers: "not\\nslow": one line of printable'),
        ('tests-keyword = "dtw"', "tests-keyword: selects among the entry's own `tests`, and it has none"),
        # a committed file named like an option: pytest would read it as one (`-p no:torchyard.inimage.plugin`)
        ('tests = ["tests", "-p", "no:torchyard.inimage.plugin"]', 'tests[1]: "-p" is not a pytest node id'),
        ('tests = ["::test_gpt"]', 'tests[0]: "::test_gpt" is not a pytest node id'),
    ],
)
def test_a_node_id_or_selection_that_cannot_be_is_one_line(tmp_path: Path, change: str, message: str) -> None:
    root = source_tree(tmp_path / "nanoGPT")
    text = SOURCE_ENTRY.format(project='{ source = "." }').replace('tests = ["tests"]', change)
    (root / "matrix.toml").write_text(VALID + text)
    with pytest.raises(ConfigError) as caught:
        load_plan(root / "matrix.toml")
    assert message in str(caught.value) and "\n" not in str(caught.value)
