"""An adopter's repository, end to end, from the built wheel: `torchyard init`, `torchyard lock`,
`nox -s test-cpu` on the real engine, then a source-only change that rebuilds only the project layer.

Nothing is copied from this checkout but `examples/robot-policy` (the adopter) and the wheel `uv build`
makes of it; torchyard runs from a venv made in the project as the getting-started guide makes it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import uuid
import zipfile
from collections.abc import Mapping
from pathlib import Path

import docker
import pytest
from docker.models.images import Image

from tests.cpu_index import CPU_WHEELS, PUBLISHED_CPU_WHEELS
from tests.docblocks import block
from tests.integration.conftest import ROBOPOLICY
from torchyard.image.buildkit import layer_steps
from torchyard.image.plan import image_repository
from torchyard.trust import project_scope
from torchyard.util import proc

REPO = Path(__file__).parents[2]
EXAMPLE = REPO / "examples" / "robot-policy"

pytestmark = pytest.mark.integration


def test_uvx_runs_the_wheel_from_anywhere(wheel: Path, tmp_path: Path) -> None:
    completed = proc.run(["uvx", "--from", str(wheel), "torchyard", "--version"], cwd=tmp_path, capture=True)
    assert completed.stdout.strip() == "torchyard 0.1.0"


def test_the_wheel_carries_the_image_files_from_docker(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        for name in ("Dockerfile", ".dockerignore"):
            assert archive.read(f"torchyard/image/{name}") == (REPO / "docker" / name).read_bytes()


def run_in(project: Path, bindir: Path, args: list[str], env: Mapping[str, str], check: bool = True) -> str:
    completed = proc.run(
        args, cwd=project, env={**env, "PATH": f"{bindir}{os.pathsep}{env['PATH']}"}, capture=True, check=check
    )
    return completed.stdout + completed.stderr


def assert_cpu_build(lock: str, image: Image, client: docker.DockerClient) -> None:
    """init's CPU entry takes PyTorch's CPU build (the hash that index publishes) and no NVIDIA library."""
    torch = re.search(r"(?m)^torch==(\S+) \\\n    --hash=sha256:(\w+)$", lock)
    assert torch and torch[1].endswith("+cpu") and not re.search(r"(?m)^(nvidia-|cuda-|triton)", lock), lock
    assert torch[2] in PUBLISHED_CPU_WHEELS.values() or CPU_WHEELS not in os.environ  # else the real index's
    built = client.containers.run(
        image, ["-c", "import torch; print(torch.__version__, torch.version.cuda)"],
        entrypoint=["/opt/torchyard/venv/bin/python"], remove=True,
    )  # fmt: skip
    assert bytes(built).decode().split() == [torch[1], "None"]


def test_adopter_project_end_to_end(
    wheel: Path, tmp_path: Path, machine_env: dict[str, str], client: docker.DockerClient
) -> None:
    machine_env = {**machine_env, **ROBOPOLICY}  # README's adoption (test_install.py) starts from its caches
    project = tmp_path / "robot-policy"
    shutil.copytree(EXAMPLE, project)
    (project / "notes").mkdir()
    (project / "notes" / "secret.log").write_text("never in an image\n")
    # A committed link to a host-only file (a pull request's): carried as a link, its target never read.
    host_secret = tmp_path / "host-only" / "id_rsa"
    host_secret.parent.mkdir()
    host_secret.write_text(f"host secret {uuid.uuid4()}\n")
    (project / "tests" / "fixture.txt").symlink_to(host_secret)
    proc.run(["git", "init", "--quiet"], cwd=project)
    proc.run(["git", "add", "--all"], cwd=project)

    # The getting-started guide's venv block, verbatim: a venv in the project, the wheel, init, lock, test-cpu.
    shutil.copy(wheel, project / "torchyard-0.1.0-py3-none-any.whl")
    completed = proc.run(
        ["bash", "-euo", "pipefail", "-c", block("getting-started-venv")], cwd=project, env=machine_env, capture=True
    )
    output = completed.stdout + completed.stderr
    installed = project / ".venv" / "bin"
    assert re.search(r"(?m)^  nox -s lock ", output), output  # init saw the venv's nox beside torchyard
    assert (project / "noxfile.py").read_text().count("torchyard.nox") == 2
    refused = proc.run(
        ["torchyard", "init"], cwd=project, capture=True, check=False,
        env={**machine_env, "PATH": f"{installed}{os.pathsep}{machine_env['PATH']}"},
    )  # fmt: skip
    assert refused.returncode == 2 and "never overwrites" in refused.stderr

    run_in(project, installed, ["nox", "-s", "lock", "--", "--check"], machine_env)
    include = run_in(project, installed, ["torchyard", "matrix", "--github"], machine_env).strip().splitlines()[-1]
    assert json.loads(include)["include"][0]["session"] == "test-cpu"
    assert "| cpu " in run_in(project, installed, ["nox", "-s", "doctor", "--", "--accelerator", "cpu"], machine_env)

    reports = project / "reports" / "cpu"
    results = json.loads((reports / "parity.json").read_text())["results"]
    passed = {(r["case"], r["backend"]) for r in results if r["outcome"] == "passed"}
    assert {("robopolicy", "eager"), ("robopolicy", "export"), ("robopolicy", "inductor")} <= passed
    # Its recorded batches (package data, InputFiles) load in the image and pass beside the random one.
    assert {("robopolicy_recorded", "export"), ("robopolicy_recorded", "inductor")} <= passed
    references = {r["reference"] for r in results if r["case"] == "robopolicy" and r["outcome"] == "passed"}
    assert references and all(kind.startswith("float32 on cpu (float64 fails") for kind in references)
    junit = (reports / "junit.xml").read_text()
    assert 'name="test_package_data_is_installed"' in junit and 'name="test_actions_are_bounded"' in junit
    scope = project_scope(project / "matrix.toml", machine_env)  # as the CLI names the project
    image = client.images.get(f"{image_repository(scope, 'cpu')}:latest")
    assert image.labels["dev.torchyard.project"] == "robopolicy" and image.labels["dev.torchyard.scope"] == scope
    listing = client.containers.run(
        image, ["-c", "import os; print(sorted(os.listdir('/workspace')))"],
        entrypoint=["/opt/torchyard/venv/bin/python"], remove=True,
    )  # fmt: skip
    assert bytes(listing).decode().strip() == "['pyproject.toml', 'tests']"  # no notes/, no .git, no src
    linked = client.containers.run(
        image, ["-c", "import os; p = '/workspace/tests/fixture.txt'; print(os.readlink(p), os.path.exists(p))"],
        entrypoint=["/opt/torchyard/venv/bin/python"], remove=True,
    )  # fmt: skip
    assert bytes(linked).decode().split() == [str(host_secret), "False"]  # a link, dangling: the secret stayed
    assert_cpu_build((project / "lockfiles" / "cpu.txt").read_text(), image, client)

    policy = project / "src" / "robopolicy" / "policy.py"
    # Unique, so no earlier build on this machine has this content in BuildKit's cache.
    policy.write_text(policy.read_text() + f"\n# a source-only change {uuid.uuid4()}\n")
    log = run_in(project, installed, ["nox", "-s", "build-cpu-image"], machine_env)
    cached = layer_steps(log)
    assert cached and all(cached.values()), f"a dependency layer was rebuilt for a source-only change: {cached}"
    project_step = next(line for line in log.splitlines() if "COPY project /opt/torchyard/project" in line)
    assert f"{project_step.split()[0]} CACHED" not in log, "the project layer was not rebuilt"
    for built in client.images.list(filters={"label": "dev.torchyard.project=robopolicy"}):
        client.images.remove(str(built.id), force=True)
