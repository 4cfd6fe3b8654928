"""The one seam git runs through: never inside a folder the pull request chose, never with configuration that
names a program, and no other module starts git."""

from __future__ import annotations

import ast
import os
import subprocess
from pathlib import Path

import pytest

from torchyard.image.source import read_project
from torchyard.util.git import Checkout, find_checkout, git_command, git_environment

pytestmark = pytest.mark.real_subprocess

SRC = Path(__file__).parents[2] / "src" / "torchyard"
SEAM = SRC / "util" / "git.py"


def sh(root: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-C", str(root), "-c", "user.email=pr@example.com", "-c", "user.name=pr", *args],
        check=True,
        capture_output=True,
    )


def payload(marker: Path) -> str:
    return f'"touch {marker}; false"'


def plant_git_dir(folder: Path, marker: Path) -> None:
    """Files that make `folder` a repository to git's discovery, whose config runs `marker`'s command from
    every key a read could reach (the pull request commits them as plain files)."""
    subprocess.run(["git", "init", "--quiet", "--bare", str(folder)], check=True, capture_output=True)
    with (folder / "config").open("a") as config:
        config.write(
            f"[core]\n\tbare = false\n\tworktree = ..\n\tfsmonitor = {payload(marker)}\n"
            f"\tpager = {payload(marker)}\n\thooksPath = hooks\n"
            f"[diff]\n\texternal = {payload(marker)}\n[include]\n\tpath = ../evil.inc\n"
        )
    (folder / "hooks" / "post-index-change").write_text(f"#!/bin/sh\ntouch {marker}\n")
    (folder / "hooks" / "post-index-change").chmod(0o755)


@pytest.fixture
def marker(tmp_path: Path) -> Path:
    return tmp_path / "ran-on-the-host"


def hostile_checkout(tmp_path: Path, marker: Path) -> Path:
    """A checkout whose pull request committed a git dir as `sub/` and points `project` at it."""
    root = tmp_path / "checkout"
    root.mkdir()
    sh(root, "init", "--quiet")
    plant_git_dir(root / "sub", marker)
    (root / "sub" / "model.py").write_text("VALUE = 1\n")
    (root / "evil.inc").write_text(f"[core]\n\tfsmonitor = {payload(marker)}\n")
    sh(root, "add", "--force", ".")
    sh(root, "commit", "--quiet", "-m", "a pull request")
    return root


def test_a_git_dir_committed_as_the_project_folder_runs_nothing(tmp_path: Path, marker: Path) -> None:
    """Issue 57, route 1: `git ls-files` started in `sub/` took it for its repository and ran core.fsmonitor."""
    root = hostile_checkout(tmp_path, marker)
    files = {item.path: item.data for item in read_project(root / "sub")}
    assert not marker.exists()
    assert files["model.py"] == b"VALUE = 1\n"
    assert "config" in files  # the planted files are data: read from the checkout's own objects


def test_a_git_dir_planted_deeper_or_with_changes_runs_nothing(tmp_path: Path, marker: Path) -> None:
    """Variants: the planted repository below the project folder, a changed and a new file (each listing of
    git's runs), and the whole checkout's top as the project."""
    root = hostile_checkout(tmp_path, marker)
    plant_git_dir(root / "sub" / "deeper", marker)
    (root / "sub" / "model.py").write_text("VALUE = 2\n")
    (root / "sub" / "new.py").write_text("NEW = 1\n")
    for folder in (root / "sub" / "deeper", root / "sub", root):
        read_project(folder)
    assert not marker.exists()


def test_no_checkout_and_a_planted_git_dir_is_read_as_files(tmp_path: Path, marker: Path) -> None:
    """Outside any checkout (a tarball of the pull request), git is never asked: the walk reads the files."""
    project = tmp_path / "unpacked"
    plant_git_dir(project, marker)
    assert find_checkout(project) is None or find_checkout(project).top != project  # type: ignore[union-attr]
    files = {item.path for item in read_project(project)}
    assert not marker.exists()
    assert "config" in files


def test_the_callers_git_variables_and_global_config_are_not_git_s(
    tmp_path: Path, marker: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A GIT_DIR or GIT_CONFIG_* of the caller's, or a ~/.gitconfig naming a program, steer nothing."""
    root = hostile_checkout(tmp_path, marker)
    home = tmp_path / "home"
    home.mkdir()
    (home / ".gitconfig").write_text(f"[core]\n\tfsmonitor = {payload(marker)}\n")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("GIT_DIR", str(root / "sub"))
    monkeypatch.setenv("GIT_CONFIG_COUNT", "1")
    monkeypatch.setenv("GIT_CONFIG_KEY_0", "core.fsmonitor")
    monkeypatch.setenv("GIT_CONFIG_VALUE_0", f"touch {marker}; false")
    files = {item.path for item in read_project(root / "sub")}
    assert not marker.exists()
    assert "model.py" in files
    seen = git_environment(os.environ)
    assert "GIT_DIR" not in seen
    assert seen["GIT_CONFIG_KEY_0"] == "safe.bareRepository"
    assert f"touch {marker}; false" not in seen.values()


def test_a_project_in_a_subfolder_lists_what_it_did_when_git_ran_there(tmp_path: Path) -> None:
    """The seam's listing of a project below the top matches git's own view from inside it: tracked,
    changed, new and ignored files, paths relative to the project."""
    root = tmp_path / "checkout"
    (root / "pkg" / "src").mkdir(parents=True)
    sh(root, "init", "--quiet")
    (root / "outside.py").write_text("OUT = 1\n")
    (root / "pkg" / "src" / "a.py").write_text("A = 1\n")
    (root / "pkg" / "b.py").write_text("B = 1\n")
    (root / "pkg" / ".gitignore").write_text("ignored.txt\n")
    sh(root, "add", ".")
    sh(root, "commit", "--quiet", "-m", "start")
    (root / "pkg" / "b.py").write_text("B = 2\n")
    (root / "pkg" / "new.py").write_text("NEW = 1\n")
    (root / "pkg" / "ignored.txt").write_text("no\n")
    files = {item.path: item.data for item in read_project(root / "pkg")}
    assert files == {".gitignore": b"ignored.txt\n", "b.py": b"B = 2\n", "new.py": b"NEW = 1\n", "src/a.py": b"A = 1\n"}


def test_the_command_names_its_git_dir_and_turns_programs_off() -> None:
    command = git_command(Checkout(Path("/w"), Path("/w/.git")), ["ls-files", "--", "p"])
    assert command[:5] == ("git", "--no-pager", "--literal-pathspecs", "--no-replace-objects", "--git-dir=/w/.git")
    assert command[5:] == ("--work-tree=/w", "ls-files", "--", "p")
    seen = git_environment({"PATH": "/usr/bin", "GIT_EXEC_PATH": "/tmp/evil"})
    pairs = {(seen[f"GIT_CONFIG_KEY_{i}"], seen[f"GIT_CONFIG_VALUE_{i}"]) for i in range(int(seen["GIT_CONFIG_COUNT"]))}
    assert {("safe.bareRepository", "explicit"), ("core.fsmonitor", "false"), ("core.hooksPath", os.devnull)} <= pairs
    assert seen["GIT_CONFIG_NOSYSTEM"] == "1" and seen["GIT_CONFIG_GLOBAL"] == os.devnull
    assert "GIT_EXEC_PATH" not in seen


def _starts_git(node: ast.AST) -> bool:
    """A list or tuple whose first item is the string `git` (or a path ending in `/git`): a command line."""
    if not isinstance(node, (ast.List, ast.Tuple)) or not node.elts:
        return False
    first = node.elts[0]
    return isinstance(first, ast.Constant) and isinstance(first.value, str) and first.value.split("/")[-1] == "git"


def test_no_module_but_the_seam_starts_git() -> None:
    """Every git command goes through `torchyard.util.git`; a new `["git", ...]` anywhere else fails here."""
    offenders = []
    for path in sorted(SRC.rglob("*.py")):
        if path == SEAM:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if _starts_git(node):
                offenders.append(f"{path.relative_to(SRC)}:{getattr(node, 'lineno', '?')}")
    assert offenders == []


def test_the_seam_check_finds_a_planted_git_command(tmp_path: Path) -> None:
    """The check above can fail: a module that starts git is named."""
    tree = ast.parse('import subprocess\nsubprocess.run(["git", "status"], cwd=project)\n')
    assert any(_starts_git(node) for node in ast.walk(tree))


def test_a_filter_driver_the_repository_defines_runs_for_no_file_the_pull_request_names(
    tmp_path: Path, marker: Path
) -> None:
    """Review of round three: the runner's checkout defines a filter driver (git-lfs's, with `lfs: true`), and the
    pull request's `.gitattributes` sends every file through it; `ls-files --modified` re-hashes a file whose
    stat changed, running the driver's clean command on the host."""
    root = tmp_path / "checkout"
    root.mkdir()
    sh(root, "init", "--quiet")
    (root / ".gitattributes").write_text("* filter=lfs\n")
    (root / "f.txt").write_text("data\n")
    sh(root, "add", ".")
    sh(root, "commit", "--quiet", "-m", "pr")
    sh(root, "config", "filter.lfs.clean", f"sh -c 'touch {marker}; cat'")
    sh(root, "config", "filter.lfs.process", f"sh -c 'touch {marker}; exit 1'")
    os.utime(root / "f.txt", (978307200, 978307200))  # stat changed: git compares the content again
    files = {item.path: item.data for item in read_project(root)}
    assert not marker.exists()
    assert files["f.txt"] == b"data\n"
