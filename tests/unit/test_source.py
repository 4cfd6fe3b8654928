"""The one gate through which the host reads a project's files: a link is carried as a link, never
followed, whether git tracks it, only sees it, or there is no git at all."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from torchyard.errors import CommandError, ImageBuildError
from torchyard.image.context import project_files
from torchyard.image.source import ProjectFile, read_nofollow, read_project, write_files
from torchyard.image.wheel import build_requirements

SECRET = b"the runner's private key\n"


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    """A file outside the project that the host can read and the project must not."""
    path = tmp_path / "id_rsa"
    path.write_bytes(SECRET)
    return path


def git(root: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True)


def no_git(args: object, **kwargs: object) -> bytes:
    raise CommandError("git failed with exit status 128: not a git repository", 128)


def planted(root: Path, secret: Path) -> Path:
    """A project with a committed link to `secret`, a link into a folder outside, and a regular file."""
    (root / "src").mkdir(parents=True)
    (root / "src" / "mod.py").write_text("VALUE = 1\n")
    (root / "src" / "run.sh").write_text("#!/bin/sh\n")
    (root / "src" / "run.sh").chmod(0o755)
    (root / "key").symlink_to(secret)
    (root / "outside").symlink_to(secret.parent)
    return root


def contents(files: tuple[ProjectFile, ...]) -> dict[str, tuple[str, bytes]]:
    return {item.path: (item.mode, item.data) for item in files}


@pytest.mark.real_subprocess
def test_a_tracked_link_is_read_as_its_target_from_git_never_followed(tmp_path: Path, secret: Path) -> None:
    root = planted(tmp_path / "project", secret)
    git(root, "init", "--quiet")
    git(root, "add", ".")
    found = contents(read_project(root))
    assert found == {
        "key": ("link", os.fsencode(secret)),
        "outside": ("link", os.fsencode(secret.parent)),
        "src/mod.py": ("file", b"VALUE = 1\n"),
        "src/run.sh": ("executable", b"#!/bin/sh\n"),
    }
    assert not any(SECRET in data for _, data in found.values())


@pytest.mark.real_subprocess
def test_untracked_and_changed_files_are_read_without_following_links(tmp_path: Path, secret: Path) -> None:
    root = tmp_path / "project"
    root.mkdir()
    (root / "tracked.py").write_text("A = 1\n")
    git(root, "init", "--quiet")
    git(root, "add", ".")
    (root / "tracked.py").unlink()
    (root / "tracked.py").symlink_to(secret)  # a tracked file turned into a link in the work tree
    (root / "new").symlink_to(secret)  # a new link, not ignored
    (root / "new.py").write_text("B = 2\n")
    found = contents(read_project(root))
    assert found == {
        "new": ("link", os.fsencode(secret)),
        "new.py": ("file", b"B = 2\n"),
        "tracked.py": ("link", os.fsencode(secret)),
    }


@pytest.mark.real_subprocess
def test_a_submodule_is_left_out(tmp_path: Path) -> None:
    root = tmp_path / "project"
    root.mkdir()
    (root / "a.py").write_text("")
    git(root, "init", "--quiet")
    git(root, "add", ".")
    git(root, "update-index", "--add", "--cacheinfo", f"160000,{'1' * 40},vendored")
    assert [item.path for item in read_project(root)] == ["a.py"]


def test_outside_git_the_walk_never_enters_or_reads_a_link(tmp_path: Path, secret: Path) -> None:
    root = planted(tmp_path / "project", secret)

    found = contents(read_project(root, no_git))
    assert set(found) == {"key", "outside", "src/mod.py", "src/run.sh"}
    assert found["key"] == ("link", os.fsencode(secret))
    assert not any(SECRET in data for _, data in found.values())


def test_a_path_through_a_link_is_not_read(tmp_path: Path, secret: Path) -> None:
    root = planted(tmp_path / "project", secret)
    assert read_nofollow(root, "outside/id_rsa") is None
    assert read_nofollow(root, "key") == ProjectFile("key", "link", os.fsencode(secret))


def test_a_dockerignore_that_is_a_link_is_not_read(tmp_path: Path, secret: Path) -> None:
    root = tmp_path / "project"
    root.mkdir()
    secret.write_text("a.py\n")
    (root / ".dockerignore").symlink_to(secret)
    (root / "a.py").write_text("")

    assert [item.path for item in project_files(root, no_git)] == [".dockerignore", "a.py"]


def test_links_are_written_back_as_links_after_every_file(tmp_path: Path, secret: Path) -> None:
    files = (
        ProjectFile("pkg", "link", b"src"),
        ProjectFile("src/mod.py", "file", b"VALUE = 1\n"),
        ProjectFile("src/run.sh", "executable", b"#!/bin/sh\n"),
        ProjectFile("key", "link", os.fsencode(secret)),
    )
    target = tmp_path / "out"
    target.mkdir()
    write_files(files, target)
    assert (target / "key").readlink() == secret and (target / "pkg").readlink() == Path("src")
    assert (target / "src" / "run.sh").stat().st_mode & 0o777 == 0o755
    assert secret.read_bytes() == SECRET  # nothing was written through a link


def test_a_path_leaving_the_project_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ImageBuildError, match=r"'\.\./escape' is not a plain relative path"):
        write_files([ProjectFile("../escape", "file", b"")], tmp_path)


def test_a_pyproject_that_is_a_link_is_never_followed(secret: Path) -> None:
    secret.write_text('[build-system]\nrequires = ["evil"]\n')
    with pytest.raises(ImageBuildError, match=r"pyproject\.toml is a link"):
        build_requirements([ProjectFile("pyproject.toml", "link", os.fsencode(secret))])


@pytest.mark.real_subprocess
def test_a_tracked_file_whose_content_the_clone_lacks_is_named_with_the_fix(tmp_path: Path) -> None:
    """A partial clone (x-transformers' snapshot lacked data/enwik8.gz) read 'git cat-file: unexpected answer
    for blob 7a8e...': the file's path, and what to do, instead."""
    root = tmp_path / "project"
    (root / "data").mkdir(parents=True)
    (root / "data" / "corpus.gz").write_bytes(b"not in this clone\n")
    (root / "model.py").write_text("VALUE = 1\n")
    git(root, "init", "--quiet")
    git(root, "add", ".")
    blob = subprocess.run(
        ["git", "-C", str(root), "rev-parse", ":data/corpus.gz"], check=True, capture_output=True, text=True
    ).stdout.strip()
    (root / ".git" / "objects" / blob[:2] / blob[2:]).unlink()
    with pytest.raises(ImageBuildError) as caught:
        read_project(root)
    assert str(caught.value) == (
        f"the project's file 'data/corpus.gz' is tracked by git, but the repository lacks its content (object "
        f"{blob[:12]}: a partial or shallow clone?): fetch it (`git fetch`), or stop tracking it (`git rm --cached "
        "data/corpus.gz`)"
    )
