"""`torchyard init` and `torchyard.nox`: what an adopter's repository gets, without running anything."""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import nox.registry
import pytest
import yaml

from torchyard.cli import main
from torchyard.commands.init import (
    GITIGNORE_HEADER,
    default_branch,
    gitignore_update,
    init,
    init_date,
    render,
    runner_spec,
    source_line,
)
from torchyard.errors import ConfigError, UsageError
from torchyard.matrix import parse_plan
from torchyard.matrix.project import read_adopter
from torchyard.names import ACCELERATOR_NAMES

TODAY = dt.date(2026, 11, 30)
REPO_MATRIX = Path(__file__).parents[2] / "matrix.toml"
GITIGNORE_BLOCK = GITIGNORE_HEADER + "/.torchyard/\n/reports/\n/.nox/\n"


def project(root: Path, requires: str = ">=3.11", dependencies: str = '["torch>=2.9,<3", "numpy"]') -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "pyproject.toml").write_text(
        f'[project]\nname = "robo"\nversion = "1"\nrequires-python = "{requires}"\ndependencies = {dependencies}\n'
    )
    (root / "tests").mkdir()
    return root


def test_the_matrix_comes_from_requires_python_and_the_torch_requirement(tmp_path: Path) -> None:
    files = render(project(tmp_path, requires=">=3.12"), TODAY, "torchyard==0.1.0")
    (tmp_path / "matrix.toml").write_text(files["matrix.toml"])
    (entry,) = parse_plan(files["matrix.toml"], tmp_path / "matrix.toml").entries
    assert (entry.name, entry.python, entry.exclude_newer) == ("cpu", "3.12", "2026-11-30T00:00:00Z")
    # pytest-xdist: the plugin's xdist_group marks are unknown without it; pytest's bound is the cpu entry's here.
    assert entry.requirements == ("torch<3,>=2.9", "pytest>=8,<9.2", "pytest-xdist>=3.6")
    assert entry.tests == ("tests",) and entry.project is not None and entry.project.name == "robo"
    assert entry.suites == ("export", "compile", "parity", "train")
    ours = parse_plan(REPO_MATRIX.read_text(), REPO_MATRIX).entries[0]
    assert ours.name == "cpu" and set(entry.requirements[1:]) <= set(ours.requirements)


def test_the_cpu_entry_takes_torchs_cpu_build_from_pytorchs_cpu_index_first(tmp_path: Path) -> None:
    files = render(project(tmp_path), TODAY, "torchyard==0.1.0")
    (tmp_path / "matrix.toml").write_text(files["matrix.toml"])
    plan = parse_plan(files["matrix.toml"], tmp_path / "matrix.toml")
    (entry,) = plan.entries
    assert [index.name for index in entry.indexes] == ["pytorch-cpu", "pypi"]  # asked in this order
    assert (
        entry.indexes[0].url == "https://download.pytorch.org/whl/cpu"
        and entry.accelerator.index_strategy == "first-index"
    )


def test_without_torch_the_entry_asks_for_torch(tmp_path: Path) -> None:
    files = render(project(tmp_path, dependencies="[]"), TODAY, "torchyard==0.1.0")
    assert 'requirements = [\n    "torch",\n' in files["matrix.toml"]


def test_noxfile_and_workflow(tmp_path: Path) -> None:
    spec = "torchyard @ git+https://github.com/acme/torchyard@0123abc"
    files = render(project(tmp_path), TODAY, spec)
    assert "import torchyard.nox\n\ntorchyard.nox.register()\n" in files["noxfile.py"]
    workflow = yaml.safe_load(files[".github/workflows/torchyard.yml"])
    assert set(workflow["jobs"]) == {"plan", "suites", "compatibility", "suites-pull-request"}
    assert workflow["env"] == {"TORCHYARD_SPEC": spec}  # one place, read by every job's install
    installs = [
        step["run"]
        for job in workflow["jobs"].values()
        for step in job["steps"]
        if "pip install" in step.get("run", "")
    ]
    assert installs == ['python -m pip install "$TORCHYARD_SPEC"'] * 4
    steps = [step.get("run", "") for step in workflow["jobs"]["suites"]["steps"]]
    command = 'nox -s ${{ matrix.session }} -- ${{ matrix.name }} --reports "$RUNNER_TEMP/reports" "${baseline[@]}"'
    assert any(command in step for step in steps)


@pytest.mark.parametrize(
    ("requires", "dependencies", "expected"),
    [
        (">=3.14", "[]", "allows none of 3.11, 3.12, 3.13"),
        ("3.11", "[]", "not a version specifier"),
        (">=3.11", '["torch >= nope"]', "not a PEP 508 requirement"),
    ],
)
def test_bad_project_metadata_is_one_line(tmp_path: Path, requires: str, dependencies: str, expected: str) -> None:
    with pytest.raises(ConfigError, match=expected):
        render(project(tmp_path, requires, dependencies), TODAY, "torchyard")


def test_init_never_overwrites_unless_forced(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = project(tmp_path)
    (root / "noxfile.py").write_text("# mine\n")
    with pytest.raises(UsageError, match=r"^noxfile.py already exist: torchyard init never overwrites"):
        init(root, today=TODAY)
    assert (root / "noxfile.py").read_text() == "# mine\n" and not (root / "matrix.toml").exists()
    assert not (root / ".gitignore").exists()  # all or nothing
    written = init(root, force=True, today=TODAY, env={"PATH": str(tmp_path / "empty")})
    assert [path.relative_to(root).as_posix() for path in written] == [
        "matrix.toml",
        "noxfile.py",
        ".github/workflows/torchyard.yml",
        ".gitignore",
    ]
    assert first_step(capsys).startswith("torchyard nox -s lock")  # no nox on PATH


def test_source_date_epoch_sets_the_day_the_locks_start_at(tmp_path: Path) -> None:
    assert init_date({"SOURCE_DATE_EPOCH": "1795824000"}) == dt.date(2026, 11, 28)  # 2026-11-28T00:00:00Z
    assert init_date({"SOURCE_DATE_EPOCH": "1795910399"}) == dt.date(2026, 11, 28)  # its last second
    assert init_date({}) == dt.datetime.now(dt.UTC).date()
    expected = r"^SOURCE_DATE_EPOCH: expected seconds since 1970 \(an integer\), got 'soon'$"
    with pytest.raises(UsageError, match=expected):
        init_date({"SOURCE_DATE_EPOCH": "soon"})
    init(project(tmp_path), env={"PATH": str(tmp_path), "SOURCE_DATE_EPOCH": "1795824000"})
    assert "exclude-newer = 2026-11-28T00:00:00Z" in (tmp_path / "matrix.toml").read_text()


def test_init_names_the_nox_that_can_import_torchyard(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The nox beside this interpreter can run the sessions; another one on PATH cannot import torchyard."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "nox").write_text("#!/bin/sh\n")
    (elsewhere / "nox").chmod(0o755)
    root = project(tmp_path)
    init(root, today=TODAY, env={"PATH": str(elsewhere)})
    assert first_step(capsys).startswith("torchyard nox -s lock")
    init(root, force=True, today=TODAY, env={"PATH": str(Path(sys.executable).parent)})
    assert first_step(capsys).startswith("nox -s lock ")


def first_step(capsys: pytest.CaptureFixture[str]) -> str:
    """The first of the steps init says come next: last, on the stream of the lines before it."""
    lines = capsys.readouterr().err.splitlines()
    return lines[lines.index("next:") + 1].strip()


def test_torchyard_nox_registers_the_standard_sessions(monkeypatch: pytest.MonkeyPatch) -> None:
    import torchyard.nox

    monkeypatch.setattr(nox.registry, "_REGISTRY", {})
    torchyard.nox.register()
    expected = {"lock", "matrix", "doctor", "base-image", "refresh", "prune", "report"}
    expected |= {f"{kind}-{name}" for name in ACCELERATOR_NAMES for kind in ("test",)}
    expected |= {f"build-{name}-image" for name in ACCELERATOR_NAMES}
    assert set(nox.registry.get()) == expected


WHEEL = "file:///home/me/dist/torchyard-0.1.0-py3-none-any.whl"


@pytest.mark.parametrize(
    ("direct_url", "expected"),
    [
        (None, ("torchyard==0.1.0", "")),  # from an index: the same release from one
        (json.dumps({"url": WHEEL, "archive_info": {}}), ("", WHEEL)),
        (
            json.dumps({"url": "file:///home/me/torchyard", "dir_info": {"editable": True}}),
            ("", "file:///home/me/torchyard"),
        ),
        (
            json.dumps(
                {"url": "https://files.example/torchyard-0.1.0.whl", "archive_info": {"hashes": {"sha256": "ab"}}}
            ),
            ("torchyard @ https://files.example/torchyard-0.1.0.whl#sha256=ab", ""),
        ),
        (
            json.dumps(
                {"url": "https://github.com/acme/torchyard", "vcs_info": {"vcs": "git", "commit_id": "0123abc"}}
            ),
            ("torchyard @ git+https://github.com/acme/torchyard@0123abc", ""),
        ),
        (
            json.dumps(
                {
                    "url": "https://github.com/acme/mono",
                    "vcs_info": {"vcs": "git", "commit_id": "f00"},
                    "subdirectory": "ty",
                }
            ),
            ("torchyard @ git+https://github.com/acme/mono@f00#subdirectory=ty", ""),
        ),
        (
            json.dumps({"url": "ssh://git@github.com/acme/torchyard", "vcs_info": {"vcs": "git"}}),
            ("", "ssh://git@github.com/acme/torchyard"),
        ),
        ("{not json", ("", "a place its direct_url.json does not say")),
    ],
)
def test_the_workflow_installs_torchyard_as_it_was_installed_where_runners_can(
    direct_url: str | None, expected: tuple[str, str]
) -> None:
    assert runner_spec(direct_url, "0.1.0") == expected


def test_a_torchyard_runners_cannot_reach_leaves_the_spec_empty_and_says_so_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("torchyard.commands.init.installed_spec", lambda: ("", WHEEL))
    init(project(tmp_path), today=TODAY, env={"PATH": ""})
    workflow = yaml.safe_load((tmp_path / ".github/workflows/torchyard.yml").read_text())
    assert workflow["env"] == {"TORCHYARD_SPEC": ""}
    (line,) = [line for line in capsys.readouterr().err.splitlines() if "TORCHYARD_SPEC" in line]
    assert line.startswith(
        f".github/workflows/torchyard.yml: TORCHYARD_SPEC left empty: this torchyard came from {WHEEL}"
    )
    assert "--torchyard-spec" in line


@pytest.mark.parametrize(
    ("given", "written"),
    [
        ("torchyard==0.2.0", "torchyard==0.2.0"),
        ("git+https://github.com/acme/torchyard@0123abc", "torchyard @ git+https://github.com/acme/torchyard@0123abc"),
        ("Torchyard @ https://files.example/t.whl", "Torchyard @ https://files.example/t.whl"),
    ],
)
def test_torchyard_spec_is_what_the_workflow_installs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], given: str, written: str
) -> None:
    monkeypatch.chdir(project(tmp_path))
    assert main(["init", "--torchyard-spec", given]) == 0
    workflow = yaml.safe_load((tmp_path / ".github/workflows/torchyard.yml").read_text())
    assert workflow["env"] == {"TORCHYARD_SPEC": written}
    assert "TORCHYARD_SPEC" not in capsys.readouterr().err


@pytest.mark.parametrize(
    "given", ["nope==1", "torchyard >= nope", "torchyard @ https://x.example/${{ secrets.TOKEN }}"]
)
def test_a_bad_torchyard_spec_is_one_line(tmp_path: Path, given: str) -> None:
    with pytest.raises(
        UsageError, match=r"^--torchyard-spec: expected a requirement for torchyard \(torchyard==VERSION"
    ):
        init(project(tmp_path), today=TODAY, spec=given)
    assert not (tmp_path / "matrix.toml").exists()


@pytest.mark.real_subprocess
@pytest.mark.parametrize(("spec", "status"), [("", 1), ("torchyard==0.1.0", 0)])
def test_the_workflows_first_step_refuses_an_empty_spec_loudly(tmp_path: Path, spec: str, status: int) -> None:
    """The plan job's first step, run as GitHub runs a `run:` step (bash -e), with the workflow's env."""
    workflow = yaml.safe_load(render(project(tmp_path), TODAY, spec)[".github/workflows/torchyard.yml"])
    first = workflow["jobs"]["plan"]["steps"][0]
    bash = shutil.which("bash")
    assert bash is not None
    ran = subprocess.run(
        [bash, "--noprofile", "--norc", "-eo", "pipefail", "-c", first["run"]],
        env={"PATH": os.defpath, **workflow["env"]},
        capture_output=True,
        text=True,
        check=False,
    )
    assert ran.returncode == status
    if status:
        assert ran.stdout.startswith("::error file=.github/workflows/torchyard.yml::TORCHYARD_SPEC is empty: set it")
    else:
        assert ran.stdout == "torchyard from: torchyard==0.1.0\n"


def with_groups(root: Path, tables: str) -> Path:
    (root / "pyproject.toml").write_text((root / "pyproject.toml").read_text() + tables)
    return root


@pytest.mark.parametrize(
    ("tables", "value"),
    [
        (
            '[project.optional-dependencies]\ntest = ["x-transformers"]\ndocs = ["mkdocs"]\n',
            '{ path = ".", extras = ["test"] }',
        ),
        ('[dependency-groups]\nTests = ["pytest-mock"]\ndev = ["ruff"]\n', '{ path = ".", groups = ["Tests"] }'),
        (
            '[project.optional-dependencies]\ndev = ["einx"]\n'
            '[dependency-groups]\ndev = [{include-group = "lint"}]\nlint = ["ruff"]\n',
            '{ path = ".", extras = ["dev"], groups = ["dev"] }',
        ),
        ('[project.optional-dependencies]\nexamples = ["tqdm"]\n', '"."'),
    ],
)
def test_the_tests_dependencies_join_the_lock_through_the_projects_extras_and_groups(
    tmp_path: Path, tables: str, value: str
) -> None:
    root = with_groups(project(tmp_path), tables)
    files = render(root, TODAY, "torchyard")
    assert f"\nproject = {value}\n" in files["matrix.toml"]
    (root / "matrix.toml").write_text(files["matrix.toml"])
    (entry,) = parse_plan(files["matrix.toml"], root / "matrix.toml").entries
    assert entry.project is not None and entry.project.name == "robo"


def test_init_says_in_one_line_which_test_dependencies_it_took_or_what_to_add(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = with_groups(project(tmp_path / "a"), '[project.optional-dependencies]\ntest = ["x-transformers"]\n')
    init(root, today=TODAY, env={"PATH": ""}, spec="torchyard")
    assert "matrix.toml: the cpu entry locks your tests' dependencies too (extra 'test')\n" in capsys.readouterr().err
    init(project(tmp_path / "b"), today=TODAY, env={"PATH": ""}, spec="torchyard")
    (line,) = [line for line in capsys.readouterr().err.splitlines() if "test dependencies" in line]
    assert line.startswith("matrix.toml: no test dependencies in pyproject.toml") and "requirements" in line


def test_a_test_extra_that_pins_the_stack_is_left_out_and_said(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """vit-pytorch's `test` extra pins torch==2.4.0: beside the entry's own torch it cannot lock."""
    tables = '[project.optional-dependencies]\ntest = ["pytest", "torch==2.4.0"]\n[dependency-groups]\ndev = ["ruff"]\n'
    root = with_groups(project(tmp_path), tables)
    init(root, today=TODAY, env={"PATH": ""}, spec="torchyard")
    assert '\nproject = { path = ".", groups = ["dev"] }\n' in (root / "matrix.toml").read_text()
    (line,) = [line for line in capsys.readouterr().err.splitlines() if "left out" in line]
    assert line == (
        "matrix.toml: the cpu entry locks your tests' dependencies too (dependency group 'dev'); left out: extra "
        "'test' pins torch==2.4.0 (the entry's stack decides those; what else your tests need goes in the cpu "
        "entry's requirements)"
    )


def test_without_a_tests_folder_no_test_dependencies_are_taken(tmp_path: Path) -> None:
    root = with_groups(project(tmp_path), '[project.optional-dependencies]\ntest = ["x-transformers"]\n')
    (root / "tests").rmdir()
    files = render(root, TODAY, "torchyard")
    assert '\nproject = "."\n' in files["matrix.toml"] and "tests =" not in files["matrix.toml"]


@pytest.mark.parametrize(("entry_point", "builtin"), [(True, False), (False, True)])
def test_the_built_in_corpus_is_stated_with_its_cost_and_left_out_where_the_project_has_cases(
    tmp_path: Path, entry_point: bool, builtin: bool
) -> None:
    """Its 14 cases cost about 280 s a run and are not the project's: off where the project has cases of its
    own; on where it has none yet, since a suite with no case fails the run."""
    root = project(tmp_path)
    if entry_point:
        with_groups(root, '[project.entry-points."torchyard.cases"]\nrobo = "robo.cases:CASES"\n')
    text = render(root, TODAY, "torchyard")["matrix.toml"]
    assert "14 small models of its own through every suite, about 280 s a CPU run" in text
    (root / "matrix.toml").write_text(text)
    (entry,) = parse_plan(text, root / "matrix.toml").entries
    assert entry.options.builtin_cases is builtin


@pytest.mark.parametrize(
    ("before", "after"),
    [
        ("", GITIGNORE_BLOCK),
        ("build/\n", "build/\n\n" + GITIGNORE_BLOCK),
        ("build/", "build/\n\n" + GITIGNORE_BLOCK),  # no newline at its end
        (".nox\n!/reports/\n", ".nox\n!/reports/\n\n" + GITIGNORE_HEADER + "/.torchyard/\n"),  # tracked on purpose
        ("/.torchyard/\nreports/\n.nox/\n", None),
    ],
)
def test_the_gitignore_gets_the_patterns_it_lacks_and_nothing_else(before: str, after: str | None) -> None:
    assert gitignore_update(before) == after
    if after is not None:
        assert gitignore_update(after) is None  # a second init adds nothing


def test_init_appends_to_the_gitignore_once_and_never_through_a_link(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = project(tmp_path / "project")
    (root / ".gitignore").write_text("*.pyc\n")
    init(root, today=TODAY, env={"PATH": ""}, spec="torchyard")
    init(root, force=True, today=TODAY, env={"PATH": ""}, spec="torchyard")
    assert (root / ".gitignore").read_text() == "*.pyc\n\n" + GITIGNORE_BLOCK
    elsewhere = tmp_path / "elsewhere"
    elsewhere.write_text("")
    (root / ".gitignore").unlink()
    (root / ".gitignore").symlink_to(elsewhere)
    with pytest.raises(
        ConfigError, match=r"\.gitignore: is a symbolic link; init edits only a file the checkout holds"
    ):
        init(root, force=True, today=TODAY, env={"PATH": ""}, spec="torchyard")
    assert elsewhere.read_text() == ""


def source_repository(root: Path, requirements: str | None = "torch>=2.0\nnumpy\ntiktoken  # BPE\n") -> Path:
    """karpathy/nanoGPT's shape: modules and scripts, no pyproject.toml, maybe a requirements.txt."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "model.py").write_text("class GPT:\n    pass\n")
    (root / "train.py").write_text("from model import GPT\n")
    if requirements is not None:
        (root / "requirements.txt").write_text(requirements)
    return root


def test_a_repository_without_a_package_gets_a_source_folder_entry_with_its_requirements(tmp_path: Path) -> None:
    root = source_repository(tmp_path / "nanoGPT")
    (root / "tests").mkdir()
    text = render(root, TODAY, "torchyard==0.1.0")["matrix.toml"]
    assert '\nproject = { source = ".", requirements-files = ["requirements.txt"] }\ntests = ["tests"]\n' in text
    assert "for nanoGPT," in text and '# cases = ["torchyard_cases"]' in text
    (root / "matrix.toml").write_text(text)
    (entry,) = parse_plan(text, root / "matrix.toml").entries
    assert entry.project is not None and (entry.project.kind, entry.project.name) == ("source", "nanogpt")
    assert entry.project.requirements == ("torch>=2.0", "numpy", "tiktoken")
    assert (entry.python, entry.requirements[0], entry.tests) == ("3.11", "torch>=2.0", ("tests",))


def test_a_research_repositorys_test_files_at_its_root_are_its_tests(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 71: a detection repository's `test_all.py` sits at its root, with no tests folder."""
    root = source_repository(tmp_path / "detr")
    for name in ("test_all.py", "hubconf_test.py", "testing.py", "main.py"):
        (root / name).write_text("def test_nothing():\n    pass\n")
    init(root, today=TODAY, env={"PATH": ""}, spec="torchyard")
    text = (root / "matrix.toml").read_text()
    assert '\ntests = ["hubconf_test.py", "test_all.py"]\n' in text
    (entry,) = parse_plan(text, root / "matrix.toml").entries
    assert entry.tests == ("hubconf_test.py", "test_all.py")
    (line,) = [line for line in capsys.readouterr().err.splitlines() if "pytest goes" in line]
    assert "the cpu entry runs hubconf_test.py, test_all.py: what they import beyond requirements.txt" in line
    (root / "test").mkdir()  # a tests folder, where there is one, is what it runs
    assert render(root, TODAY, "torchyard==0.1.0")["matrix.toml"].count('\ntests = ["test"]\n') == 1


@pytest.mark.parametrize("pyproject", [None, "[tool.ruff]\nline-length = 100\n"])
def test_without_a_requirements_file_the_source_folder_entry_asks_for_what_it_imports(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], pyproject: str | None
) -> None:
    """No pyproject.toml, or one of tool settings only: no package, so a source folder."""
    root = source_repository(tmp_path, requirements=None)
    if pyproject is not None:
        (root / "pyproject.toml").write_text(pyproject)
    init(root, today=TODAY, env={"PATH": ""}, spec="torchyard")
    text = (root / "matrix.toml").read_text()
    assert '\nproject = { source = "." }\nrequirements = [\n    "torch",\n' in text
    (entry,) = parse_plan(text, root / "matrix.toml").entries
    assert entry.project is not None and entry.project.kind == "source" and entry.project.requirements == ()
    (line,) = [line for line in capsys.readouterr().err.splitlines() if "no package here" in line]
    assert line.endswith("with Python 3.11; no requirements.txt: what your modules import beyond torch goes in the "
                         "cpu entry's requirements")  # fmt: skip


def test_a_source_folders_requirements_file_is_read_as_the_loader_reads_it(tmp_path: Path) -> None:
    """Issue 71: init refused a research repository's requirements.txt outright for one `git+` line, cut at 57
    characters. What the lock cannot take (an option, a URL) is now left out, said whole with why, and the rest
    goes in the entry's requirements; the file itself is not named for the lock, which would refuse it."""
    cocoapi = "git+https://github.com/cocodataset/cocoapi.git#subdirectory=PythonAPI&egg=pycocotools"
    root = source_repository(
        tmp_path / "checkout", f"--index-url https://evil.example/simple\ntorch\n{cocoapi}\nscipy\n"
    )
    facts = read_adopter(root)
    assert facts.requirements_file is None and facts.setup_requirements == ("torch", "scipy")
    assert facts.left_lines[0].startswith("requirements.txt:1: '--index-url https://evil.example/simple' is an option")
    assert facts.left_lines[1].startswith(f"requirements.txt:3: not a PEP 508 requirement: {cocoapi!r}")
    matrix = render(root, TODAY, "torchyard", facts)["matrix.toml"]
    assert "requirements-files" not in matrix and '"scipy",' in matrix and "evil" not in matrix
    (tmp_path / "checkout" / "matrix.toml").write_text(matrix)
    (entry,) = parse_plan(matrix, tmp_path / "checkout" / "matrix.toml").entries
    assert "scipy" in entry.requirements
    assert cocoapi in source_line(facts) and "add by hand" in source_line(facts)
    secret = tmp_path / "host-secret.txt"
    secret.write_text("the runner's secret\n")
    (root / "requirements.txt").unlink()
    (root / "requirements.txt").symlink_to(secret)
    with pytest.raises(ConfigError, match="symbolic link") as caught:
        render(root, TODAY, "torchyard")
    assert "runner's secret" not in str(caught.value)


ROTARY_SETUP = """from setuptools import setup, find_packages

setup(
  name = 'rotary-embedding-torch',
  packages = find_packages(),
  install_requires=[
    'einops>=0.7',
    'torch>=2.0'
  ],
)
"""


@pytest.mark.parametrize(
    ("setup", "said"),
    [
        (ROTARY_SETUP, "setup.py's install_requires (einops>=0.7, torch>=2.0) is in its requirements"),
        ("import setuptools\nsetuptools.setup(name='x')\n", "setup.py's install_requires lists none: what your"),
        ("from setuptools import setup\nsetup(install_requires=open('r.txt').read().split())\n", "is not a literal"),
        ("import os; os.system('touch RAN')\nsetup(\n", "is not a literal list init can read"),
        ("from setuptools import setup\nsetup(install_requires={[1]: 2})\n", "is not a literal list init can read"),
        # A module-level call of another object's setup() comes first in the walk; the package's own one counts.
        (
            "log.setup(name='x')\ndef main():\n    " + ROTARY_SETUP.replace("\n", "\n    ") + "\nmain()\n",
            "(einops>=0.7",
        ),
        (ROTARY_SETUP.replace("'torch>=2.0'", "'torch>=2.0', 'einx; platform_release == \"\U0001f600\"'"), "einx"),
    ],
)
def test_a_setup_py_package_is_a_source_folder_with_its_literal_install_requires(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], setup: str, said: str
) -> None:
    """lucidrains/rotary-embedding-torch's shape: a setup.py and no pyproject. Its metadata is not static and the
    host never runs it, so its modules are a source folder; a literal install_requires is read, never run."""
    root = tmp_path / "rotary"
    (root / "rotary_embedding_torch").mkdir(parents=True)
    (root / "setup.py").write_text(setup)
    init(root, today=TODAY, env={"PATH": ""}, spec="torchyard")
    assert not (root / "RAN").exists()
    text = (root / "matrix.toml").read_text()
    (entry,) = parse_plan(text, root / "matrix.toml").entries
    assert entry.project is not None and entry.project.kind == "source"
    (line,) = [line for line in capsys.readouterr().err.splitlines() if "no package here" in line]
    assert "(no pyproject.toml [project]; setup.py is never run on the host)" in line and said in line, line
    if "einops>=0.7" in setup:
        assert entry.requirements[:2] == ("torch>=2.0", "einops>=0.7")
        assert "    # setup.py's install_requires, as init read it (it never runs setup.py)\n" in text
        einx = 'einx; platform_release == "\U0001f600"'  # written as itself: TOML takes no surrogate escapes
        assert (einx in entry.requirements) == ("einx" in setup)
    else:
        assert entry.requirements[0] == "torch" and "install_requires" not in text


def test_a_setup_py_requirement_that_is_not_pep_508_is_one_line(tmp_path: Path) -> None:
    root = tmp_path / "odd"
    root.mkdir()
    (root / "setup.py").write_text("from setuptools import setup\nsetup(install_requires=['torch >> 2'])\n")
    with pytest.raises(ConfigError, match=r"^setup.py: install_requires: not a PEP 508 requirement: 'torch >> 2'$"):
        render(root, TODAY, "torchyard")


def test_the_workflow_runs_on_pushes_to_the_default_branch_only(tmp_path: Path) -> None:
    """Issue 70: the template ran on a push to any branch, and gave that branch's own noxfile the runners and the
    registry's secrets, though torchyard trusts only the default branch. Now its push filter names the default
    branch git names, and its plan job (which every other job needs) checks the one GitHub names."""
    repo = tmp_path / "repo"
    (repo / ".git" / "objects").mkdir(parents=True)
    (repo / ".git" / "HEAD").write_text("ref: refs/heads/feature\n")
    said = {"refs/remotes/origin/HEAD": b"origin/trunk\n", "HEAD": b"feature\n"}

    def git(args: object, **_: object) -> bytes:
        return said.get(list(args)[-1], b"")  # type: ignore[call-overload]

    assert default_branch(repo, runner=git) == "trunk"
    del said["refs/remotes/origin/HEAD"]  # a repository with no remote: the branch checked out
    assert default_branch(repo, runner=git) == "feature"
    said["HEAD"] = b"feat+[x]\n"  # a pattern to the filter: the plain default instead
    assert default_branch(repo, runner=git) == "main"
    assert default_branch(tmp_path / "elsewhere") == "main"  # no checkout: nothing run, the plain default

    workflow = yaml.safe_load(
        render(project(tmp_path / "elsewhere"), TODAY, "torchyard==0.1.0", branch="trunk")[
            ".github/workflows/torchyard.yml"
        ]
    )
    on = workflow[True]  # YAML 1.1 reads the key `on` as true
    assert on["push"] == {"branches": ["trunk"]}
    plan = workflow["jobs"]["plan"]
    default = "github.ref == format('refs/heads/{0}', github.event.repository.default_branch)"
    assert plan["if"] == f"github.event_name != 'push' || {default}"
    for name, job in workflow["jobs"].items():
        assert name == "plan" or "plan" in job["needs"] or "suites" in job["needs"], name
