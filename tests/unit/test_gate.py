"""The trust gate: an untrusted run takes where and how its entries run from the trusted matrix.toml alone."""

from __future__ import annotations

from pathlib import Path

import pytest

from torchyard.errors import ConfigError
from torchyard.matrix.gate import TRUSTED_MATRIX_ENV, TrustedConfig, gate_entries, load_trusted
from torchyard.matrix.load import parse_plan

from .matrix_text import VALID

MOUNT = '"--mount", "type=bind,source=/data,target=/data"'


def _plan(text: str, allowed: frozenset[str] = frozenset({"--mount"})):  # type: ignore[no-untyped-def]
    return parse_plan(text, Path("matrix.toml"), allowed_docker_run=allowed)


def _trusted(text: str = VALID) -> TrustedConfig:
    return TrustedConfig(_plan(text), "trusted.toml")


def _with_cuda_flags(flags: str) -> str:
    return VALID.replace('docker-run = ["--shm-size", "8g"]', f'docker-run = ["--shm-size", "8g", {flags}]')


def test_a_trusted_run_is_not_gated() -> None:
    hostile = _plan(_with_cuda_flags('"--mount", "type=bind,source=/,target=/host"'))
    assert gate_entries(hostile.entries, "trusted", TrustedConfig(None, "")) == hostile.entries


def test_an_untrusted_run_of_the_trusted_configuration_passes() -> None:
    plan = _plan(VALID)
    assert gate_entries(plan.entries, "untrusted", _trusted()) == plan.entries


@pytest.mark.parametrize(
    ("edit", "field"),
    [
        # The critical route: a GPU entry's labels edited so that no `self-hosted` word is left.
        (('runs-on = ["self-hosted", "gpu", "cuda"]', 'runs-on = ["linux", "x64", "gpu", "cuda"]'), "runs-on"),
        (('runs-on = ["self-hosted", "gpu", "cuda"]', 'runs-on = ["ubuntu-24.04"]'), "runs-on"),
        (('index-strategy = "unsafe-best-match"', 'index-strategy = "first-index"'), "index-strategy"),
        (('indexes = ["pypi", "extra"]', 'indexes = ["extra"]'), "indexes"),
        (('torch = "2.9.1"', 'torch = "2.9.0"'), "vendor"),
        (("ubuntu:24.04@sha256:1e62", "ubuntu:22.04@sha256:1e62"), "base-image"),
    ],
)
def test_a_pull_request_cannot_change_a_policy_value(edit: tuple[str, str], field: str) -> None:
    hostile = _plan(VALID.replace(*edit))
    with pytest.raises(ConfigError) as caught:
        gate_entries(hostile.entries, "untrusted", _trusted())
    assert str(caught.value).startswith(
        f'matrix.toml: entry "cuda" > accelerators > cuda: this untrusted run changes {field} '
    )


def test_an_accelerator_the_trusted_matrix_lacks_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"only accelerators the trusted matrix\.toml"):
        gate_entries(_plan(VALID).entries, "untrusted", TrustedConfig(_plan(_cpu_only()), "t"))


def _cpu_only() -> str:
    head, _, rest = VALID.partition("[accelerators.cuda]")
    entries = rest[rest.index("[[entry]]") :]
    return head + entries.split('[[entry]]\nname = "cuda"')[0]


@pytest.mark.parametrize(
    "flags",
    [
        '"--mount", "type=bind,source=/,target=/host"',  # a flag the machine allows, with the pull request's value
        '"--mount=type=bind,source=/var/run/docker.sock,target=/s"',
        '"--mount", "type=bind,source=/data,target=/data,readonly=false", "--mount", "type=bind,source=/,target=/h"',
    ],
)
def test_a_flag_the_machine_allows_takes_only_the_trusted_value(flags: str) -> None:
    trusted = _trusted(_with_cuda_flags(MOUNT))
    hostile = _plan(_with_cuda_flags(flags))
    with pytest.raises(ConfigError, match="an untrusted run takes '--mount"):
        gate_entries(hostile.entries, "untrusted", trusted)
    same = _plan(_with_cuda_flags(MOUNT))
    assert gate_entries(same.entries, "untrusted", trusted) == same.entries


def test_without_a_trusted_matrix_an_untrusted_run_is_refused_in_one_line() -> None:
    """Fail closed: with no trusted matrix.toml to compare with, the pull request's own runners, bases and
    indexes would pass as they are."""
    tighter = _plan(_with_cuda_flags('"--memory", "2g", "--env", "SEED=1"'))
    with pytest.raises(
        ConfigError, match=r"an untrusted run keeps the trusted matrix\.toml's runners.*set TORCHYARD_TRUSTED_MATRIX"
    ):
        gate_entries(tighter.entries, "untrusted", TrustedConfig(None, "none"))
    assert gate_entries(tighter.entries, "trusted", TrustedConfig(None, "none")) == tighter.entries


def test_the_trusted_matrix_resolves_its_project_beside_the_checkout(tmp_path: Path) -> None:
    """The workflow copies the default branch's matrix.toml to $RUNNER_TEMP; `project = "."` is the checkout's."""
    checkout, elsewhere = tmp_path / "checkout", tmp_path / "runner-temp"
    checkout.mkdir()
    elsewhere.mkdir()
    (checkout / "pyproject.toml").write_text('[project]\nname = "mine"\nversion = "1"\n')
    text = VALID.replace('name = "cpu"\n', 'name = "cpu"\nproject = "."\n', 1)
    (elsewhere / "matrix.toml").write_text(text)
    loaded = load_trusted(checkout / "matrix.toml", (), {TRUSTED_MATRIX_ENV: str(elsewhere / "matrix.toml")})
    assert loaded.plan is not None
    project = loaded.plan.entry("cpu").project
    assert project is not None and project.root == checkout


def test_an_unreadable_trusted_matrix_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"TORCHYARD_TRUSTED_MATRIX=.*cannot read the trusted matrix\.toml"):
        load_trusted(tmp_path / "matrix.toml", (), {TRUSTED_MATRIX_ENV: str(tmp_path / "missing.toml")})


def test_an_entry_with_its_own_base_is_compared_with_its_trusted_self() -> None:
    base = 'base-image = "debian:trixie-slim@sha256:' + "a" * 64 + '"\n'
    text = VALID.replace('name = "cpu"\n', 'name = "cpu"\n' + base, 1)
    assert gate_entries(_plan(text).entries, "untrusted", _trusted(text)) == _plan(text).entries
    with pytest.raises(ConfigError, match="changes base-image"):
        gate_entries(_plan(text.replace("a" * 64, "b" * 64)).entries, "untrusted", _trusted(text))


def test_a_pull_request_can_add_kinds_of_change_that_fail_its_run_never_drop_one() -> None:
    """Issue 60: `fail-on-change` is a policy: an untrusted run fails on the trusted entry's kinds and any the
    pull request adds; a pull request that deletes the key fails on the trusted kinds still."""
    trusted = VALID.replace('name = "cuda"', 'name = "cuda"\nfail-on-change = ["graph-breaks"]')
    dropped = _plan(VALID)
    gated = {
        entry.name: entry.fail_on_change for entry in gate_entries(dropped.entries, "untrusted", _trusted(trusted))
    }
    assert gated["cuda"] == ("graph-breaks",)
    added = _plan(VALID.replace('name = "cuda"', 'name = "cuda"\nfail-on-change = ["delegation"]'))
    gated = {e.name: e.fail_on_change for e in gate_entries(added.entries, "untrusted", _trusted(trusted))}
    assert gated["cuda"] == ("graph-breaks", "delegation")
    assert gate_entries(added.entries, "trusted", _trusted(trusted)) == added.entries  # a trusted run's own
