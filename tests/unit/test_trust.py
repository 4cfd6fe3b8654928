"""A run's trust: the flag, the variable, then GitHub Actions' event; and the project a cache belongs to."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from torchyard.errors import UsageError
from torchyard.trust import project_scope, resolve_trust


def _actions(tmp_path: Path, event: str, ref: str, default: str = "main", **extra: str) -> dict[str, str]:
    payload = tmp_path / "event.json"
    payload.write_text(json.dumps({"repository": {"default_branch": default}}))
    return {
        "GITHUB_ACTIONS": "true",
        "GITHUB_EVENT_NAME": event,
        "GITHUB_REF_NAME": ref,
        "GITHUB_REF_TYPE": "branch",
        "GITHUB_EVENT_PATH": str(payload),
        **extra,
    }


@pytest.mark.parametrize(
    ("event", "ref", "level"),
    [
        ("push", "main", "trusted"),
        ("schedule", "main", "trusted"),
        ("workflow_dispatch", "main", "trusted"),
        ("push", "feature", "untrusted"),
        ("pull_request", "42/merge", "untrusted"),
        ("pull_request_target", "main", "untrusted"),
        ("workflow_run", "main", "untrusted"),
    ],
)
def test_actions_events_decide_the_trust(tmp_path: Path, event: str, ref: str, level: str) -> None:
    assert resolve_trust(None, _actions(tmp_path, event, ref)).level == level


def test_the_flag_wins_then_the_variable_and_outside_actions_a_persons_run_is_trusted(tmp_path: Path) -> None:
    pull_request = _actions(tmp_path, "pull_request", "42/merge")
    assert resolve_trust("trusted", {**pull_request, "TORCHYARD_TRUST": "untrusted"}).why == "--trust"
    assert resolve_trust(None, {**pull_request, "TORCHYARD_TRUST": "trusted"}).level == "trusted"
    assert resolve_trust(None, {}).level == "trusted"
    assert resolve_trust(None, {}).why == "outside GitHub Actions"
    # An unreadable event payload: no default branch to compare with, so not trusted.
    broken = {**_actions(tmp_path, "push", "main"), "GITHUB_EVENT_PATH": str(tmp_path / "absent.json")}
    assert resolve_trust(None, broken).level == "untrusted"


def test_a_misspelt_trust_is_one_line() -> None:
    with pytest.raises(UsageError, match=r"^TORCHYARD_TRUST: expected trusted or untrusted, got 'yes'$"):
        resolve_trust(None, {"TORCHYARD_TRUST": "yes"})


def test_projects_have_scopes_of_their_own(tmp_path: Path) -> None:
    first, second = tmp_path / "a" / "matrix.toml", tmp_path / "b" / "matrix.toml"
    assert project_scope(first, {}) != project_scope(second, {})
    assert re.fullmatch(r"a-[0-9a-f]{12}", project_scope(first, {}))
    named = {"GITHUB_REPOSITORY": "org/robot"}
    assert (
        project_scope(first, named)
        == project_scope(second, named)
        != project_scope(first, {"GITHUB_REPOSITORY": "org/x"})
    )
    # The same repository name under two owners: two projects, told apart by the hash.
    assert project_scope(first, {"GITHUB_REPOSITORY": "other/robot"}) != project_scope(first, named)


@pytest.mark.parametrize(
    ("identity", "readable"),
    [
        ("karpathy/nanoGPT", "nanogpt"),
        ("lucidrains/vector-quantize-pytorch", "vector-quantize-pytorch"),
        ("acme/Under_Score.dots", "under-score-dots"),
        ("acme/___", "project"),
        ("acme/" + "x" * 80, "x" * 32),
    ],
)
def test_a_projects_scope_is_a_readable_name_docker_takes_and_a_hash(identity: str, readable: str) -> None:
    scope = project_scope(Path("/nowhere/matrix.toml"), {"GITHUB_REPOSITORY": identity})
    name, _, digest = scope.rpartition("-")
    assert name == readable and re.fullmatch(r"[0-9a-f]{12}", digest)
    # A path component of an image name, and part of a volume's name (torchyard.image.plan, torchyard.run.scopes).
    assert re.fullmatch(r"[a-z0-9]+(?:(?:[._]|__|[-]+)[a-z0-9]+)*", scope)


def test_two_matrix_files_of_one_repository_share_no_entry_cache_or_baseline(tmp_path: Path) -> None:
    """Issue 70: examples/zoo/matrix.toml's `cpu` and the root's `cpu`, both named as Actions names the
    repository, read and wrote one trusted volume and one kept baseline, and each run was held to the other's.
    The matrix file's path within its checkout now sets them apart; the project (the siblings a new cache
    starts from) stays the repository's, and the root's own matrix.toml keeps its names."""
    from torchyard.matrix.load import load_plan
    from torchyard.run.scopes import cache_scope
    from torchyard.trust import matrix_tag

    (tmp_path / ".git" / "objects").mkdir(parents=True)
    (tmp_path / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    root, zoo = tmp_path / "matrix.toml", tmp_path / "examples" / "zoo" / "matrix.toml"
    assert matrix_tag(root) == ""
    assert re.fullmatch(r"-m[0-9a-f]{8}", matrix_tag(zoo)) and matrix_tag(zoo) != matrix_tag(tmp_path / "gpu.toml")
    assert matrix_tag(tmp_path / "outside" / "matrix.toml") == matrix_tag(tmp_path / "outside" / "matrix.toml")
    env = {"GITHUB_REPOSITORY": "torchyard/torchyard"}
    assert project_scope(root, env) == project_scope(zoo, env)
    entry = next(iter(load_plan(Path(__file__).parents[2] / "matrix.toml").entries))
    ours = cache_scope(entry, project_scope(root, env), "trusted", "1")
    theirs = cache_scope(entry, project_scope(zoo, env), "trusted", "1", matrix_tag=matrix_tag(zoo))
    assert ours.volume != theirs.volume and ours.project == theirs.project
    assert ours.volume == f"torchyard-cache-{ours.project}-{entry.name}"  # the root's trusted cache keeps its name
