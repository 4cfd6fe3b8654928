"""An untrusted run's image build: the trusted configuration's bases, indexes and vendor settings, no
credentials, wheels only, and a tag of its own."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from torchyard.errors import ConfigError, ImageBuildError
from torchyard.image.policy import (
    BuildPolicy,
    build_policy,
    build_sources,
    check_untrusted_build,
    secret_in_url,
    without_credentials,
)
from torchyard.matrix import load_plan
from torchyard.matrix.gate import TrustedConfig
from torchyard.matrix.machine import Source
from torchyard.matrix.schema import ImageRef
from torchyard.trust import level_of

MATRIX = Path(__file__).parents[2] / "matrix.toml"
PLAN = load_plan(MATRIX)


def test_a_trusted_run_builds_as_configured() -> None:
    policy = build_policy({"TORCHYARD_TRUST": "trusted"})
    assert policy.trusted and policy.build_args == ()
    check_untrusted_build(PLAN.entry("cpu"), policy)


@pytest.mark.parametrize(
    "env", [{}, {"TORCHYARD_TRUST": ""}, {"TORCHYARD_TRUST": "yes"}, {"TORCHYARD_TRUST": "Trusted"}]
)
def test_a_level_the_run_did_not_resolve_is_untrusted(env: dict[str, str]) -> None:
    """Issue 72: trust read back from the environment took a missing variable as trusted. The CLI resolves the
    level and puts it there for every build and run; anything else fails closed."""
    assert level_of(env) == "untrusted"
    assert level_of({"TORCHYARD_TRUST": "trusted"}) == "trusted"


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
    assert script.count('"${uv}" pip install') == 1
    dockerfile = (docker / "Dockerfile").read_text()
    assert "ARG WHEELS_ONLY" in dockerfile.partition("install-layer.sh")[0]  # in scope for every group
    dependencies = dockerfile.partition("FROM toolchain AS dependencies")[2]
    assert dependencies and "uv pip install" not in dependencies.partition("COPY project")[0]


@pytest.mark.parametrize(
    ("url", "where"),
    [
        ("https://mirror.internal/simple?token=s3cret", "its query"),
        ("https://mirror.internal/simple#s3cret", "its fragment"),
        ("https://pypi.fury.io/AbCdEf0123456789GhIjKl/team/", "a path segment that reads as a token"),
        ("https://mirror.internal/t/glpat-AbCdEfGhIjKlMnOpQrSt/simple", "a path segment that reads as a token"),
        ("https://mirror.internal/t/ghp_AbCdEfGhIjKlMnOpQrStUvWx/simple", "a path segment that reads as a token"),
        ("https://dl.cloudsmith.io/AbCd1234EfGh5678/acme/torch/python/simple/", "a path segment that reads as a token"),
        ("https://mirror.internal/6f1e2d3c-0a9b-4c8d-9e7f-112233445566/simple", "a path segment that reads as a token"),
        ("https://mirror.internal/t%3Ds3cret/simple", "a path segment that reads as a token"),
        ("https://mirror.internal/simple;token=s3cret", "a path segment that reads as a token"),
    ],
)
def test_an_untrusted_build_gets_no_index_url_that_may_carry_a_secret(url: str, where: str) -> None:
    """Route 3 of issue 57: a token kept in a mirror URL's query or path reached an untrusted build step."""
    untrusted = BuildPolicy(trusted=False, trusted_config=TrustedConfig(PLAN, "the trusted matrix.toml"))
    sources = [Source("pypi", "index", url)]
    with pytest.raises(ImageBuildError, match=f"index 'pypi' \\(https://[a-z.]+/...\\) may carry a secret in {where}"):
        build_sources(PLAN.entry("cpu"), untrusted, sources)
    try:
        build_sources(PLAN.entry("cpu"), untrusted, sources)
    except ImageBuildError as error:
        assert "s3cret" not in str(error) and "AbCdEf" not in str(error)
    assert build_sources(PLAN.entry("cpu"), BuildPolicy(), sources) == sources  # a trusted build keeps its URL


def test_plain_index_urls_pass_an_untrusted_build() -> None:
    for url in (
        "https://download.pytorch.org/whl/cu128",
        "https://pypi.org/simple",
        "https://pkgs.dev.azure.com/team/_packaging/torch-feed/pypi/simple/",
        "https://nexus.corp.example/repository/pypi-proxy/simple",  # a word, not a token's prefix
        "https://europe-python.pkg.dev/robot-policies-2041/wheels/simple/",
        "/srv/wheels",
        "/tmp/pytest-of-root/test_an_untrusted_build_runs_n0/wheels",
    ):
        assert secret_in_url(url) == "", url


def test_the_installer_never_starts_the_venvs_python_and_compiles_without_site() -> None:
    """Route 3 of issue 57: uv starts the interpreter it is given (with site), so `--python` names the base's
    interpreter and the venv is a --prefix; bytecode is compiled by `-I -S`, not uv's --compile-bytecode."""
    docker = Path(__file__).parents[2] / "docker"
    script = (docker / "install-layer.sh").read_text()
    code = "\n".join(line for line in script.splitlines() if not line.lstrip().startswith("#"))
    assert '"${uv}" pip install --python "${base}" --prefix "${venv}"' in code
    assert "--compile-bytecode" not in code and "-I -S -m compileall" in code
    dockerfile = (docker / "Dockerfile").read_text()
    runs = [line for line in dockerfile.splitlines() if not line.lstrip().startswith("#")]
    assert not any("--python /opt/torchyard/venv/bin/python" in line for line in runs)
    assert "install-layer.sh --wheels" in dockerfile.partition("COPY project")[2]


def test_no_build_step_finds_a_program_the_lock_put_in_the_venv() -> None:
    """A package of the lock, or the project's wheel through `.data/scripts`, can put a `sed`, `grep` or `bash`
    in the venv's bin folder: build steps never have it on PATH (only the final image does, after the last
    RUN), the installer sets a fixed PATH and names uv by its path, and the interpreter it tells uv is the
    base's, read before the venv exists (it had named the venv's own: every layer then started it with site)."""
    docker = Path(__file__).parents[2] / "docker"
    dockerfile = (docker / "Dockerfile").read_text()
    before_last_run, _, after = dockerfile.rpartition("\nRUN ")
    assert "venv/bin" not in "".join(
        line for line in before_last_run.splitlines() if line.lstrip().startswith(("ENV", "PATH="))
    )
    assert (
        "PATH=/opt/torchyard/venv/bin:${PATH}" in after.partition("\n\n")[2] or "PATH=/opt/torchyard/venv/bin" in after
    )
    runs = [
        line for line in dockerfile.splitlines() if "install-layer.sh" in line and not line.lstrip().startswith("#")
    ]
    assert runs and all("/bin/bash /opt/torchyard/install-layer.sh" in line for line in runs if "COPY" not in line)
    record = dockerfile.partition("vendor.py record")[0].rpartition("RUN ")[2]
    assert "> /opt/torchyard/base-python" in record  # written before `vendor.py venv` makes the venv
    script = (docker / "install-layer.sh").read_text()
    assert "export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" in script
    assert "uv=/opt/torchyard/tools/bin/uv" in script and "lies in the venv: refusing" in script
