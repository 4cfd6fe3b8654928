"""An untrusted run's image build: the trusted configuration's bases, indexes and vendor settings, no
credentials, wheels only, and a tag of its own."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from torchyard.errors import ConfigError, ImageBuildError
from torchyard.image.policy import BuildPolicy, build_policy, check_untrusted_build, without_credentials
from torchyard.matrix import load_plan
from torchyard.matrix.machine import Source
from torchyard.matrix.schema import ImageRef

MATRIX = Path(__file__).parents[2] / "matrix.toml"
PLAN = load_plan(MATRIX)


def test_a_trusted_run_builds_as_configured() -> None:
    policy = build_policy({})
    assert policy.trusted and policy.build_args == ()
    check_untrusted_build(PLAN.entry("cpu"), policy)


def test_an_untrusted_build_takes_the_trusted_configuration(tmp_path: Path) -> None:
    policy = build_policy({"TORCHYARD_TRUST": "untrusted", "TORCHYARD_TRUSTED_MATRIX": str(MATRIX)})
    assert not policy.trusted and policy.build_args == (("WHEELS_ONLY", "1"),)
    check_untrusted_build(PLAN.entry("cpu"), policy)  # unchanged: builds
    cpu = PLAN.entry("cpu")
    moved = dataclasses.replace(
        cpu, accelerator=dataclasses.replace(cpu.accelerator, base_image=ImageRef("evil/base", "sha256:" + "1" * 64))
    )
    with pytest.raises(ConfigError) as caught:  # the trust gate's rule, held again by the build
        check_untrusted_build(moved, policy)
    assert str(caught.value) == (
        f'matrix.toml: entry "cpu" > accelerators > cpu: this untrusted run changes base-image from the trusted '
        f"matrix.toml ({MATRIX}); where and how entries run changes only once the change is trusted"
    )
    with pytest.raises(ImageBuildError, match="set TORCHYARD_TRUSTED_MATRIX to the default branch's"):
        check_untrusted_build(cpu, BuildPolicy(trusted=False))


def test_an_untrusted_build_gets_no_credentials() -> None:
    sources = [
        Source("pypi", "index", "https://ci:s3cret@mirror.internal:8443/simple"),
        Source("local", "find-links", "/srv/wheels"),
    ]
    assert without_credentials(sources) == [
        Source("pypi", "index", "https://mirror.internal:8443/simple"),
        Source("local", "find-links", "/srv/wheels"),
    ]


def test_every_dependency_layer_installs_wheels_only_for_an_untrusted_build() -> None:
    docker = Path(__file__).parents[2] / "docker"
    script = (docker / "install-layer.sh").read_text()
    assert 'if [ -n "${WHEELS_ONLY}" ]; then hashes+=(--no-build); fi' in script
    assert script.count("uv pip install") == 1
    dockerfile = (docker / "Dockerfile").read_text()
    assert "ARG WHEELS_ONLY" in dockerfile.partition("install-layer.sh")[0]  # in scope for every group
    dependencies = dockerfile.partition("FROM toolchain AS dependencies")[2]
    assert dependencies and "uv pip install" not in dependencies.partition("COPY project")[0]
