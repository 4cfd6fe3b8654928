"""Integration tests use the real Docker engine and real uv. They fail, never skip, when either is
missing: CI starts dockerd before running them (.ci/run)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
import tomllib
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import bcrypt
import docker
import pytest

from tests.cpu_index import CPU_WHEELS, with_index, write_cpu_index
from torchyard.commands.build import make_base
from torchyard.host.engine import engine
from torchyard.image.debootstrap import DEFAULT_TAG
from torchyard.image.layers import image_keys
from torchyard.image.plan import DEPENDENCY_REPOSITORY
from torchyard.trust import TRUST_ENV, project_scope
from torchyard.util import proc

REPO = Path(__file__).parents[2]
# What a build reads from the project folder; torchyard's own files come from the installed package.
TREE_ITEMS = ("lockfiles", "matrix.toml")
# The project the tests' own builds are named for, as Actions names one: alike on every runner of a repository
# (`torchyard/<project>/<entry>`), so a second runner's build finds what the first one pushed.
PROJECT = project_scope(Path("matrix.toml"), {"GITHUB_REPOSITORY": "torchyard-tests/integration"})
# The level the CLI resolves for a person's own run and puts in the environment of every build and run: the
# builds and runs these tests call directly read it back, and a missing one reads as untrusted (`trust.level_of`).
# A test of an untrusted run says so itself.
os.environ.setdefault(TRUST_ENV, "trusted")


# Tests that empty BuildKit's cache so that their first build starts cold: run first, so the builds after
# them (the cpu image most tests share, and a runner's later jobs, such as `.ci/run`'s main job) reuse the
# layers the engine keeps rather than building torch's again.
EMPTIES_THE_BUILD_CACHE = ("test_layers.py", "test_registry.py")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=lambda item: item.path.name not in EMPTIES_THE_BUILD_CACHE)  # stable: the rest keep their order


@pytest.fixture(scope="session")
def client() -> docker.DockerClient:
    return engine()


# The robot-policy example is adopted twice on this runner (the guide's venv, README's `uv tool install`) as one
# project, named as Actions names it: the second adoption's run starts from the first's caches and kept results,
# as a runner's next job of a project does. Its volumes go when the session ends.
ROBOPOLICY = {"GITHUB_REPOSITORY": "torchyard-tests/testrobopolicy"}
ROBOPOLICY_SCOPE = project_scope(Path("matrix.toml"), ROBOPOLICY)


def _remove_scopes(client: docker.DockerClient, kept: tuple[str, ...]) -> None:
    for volume in client.volumes.list(filters={"label": "dev.torchyard.scope"}):
        scope = str((volume.attrs.get("Labels") or {}).get("dev.torchyard.scope", ""))
        if scope.startswith("test") and scope not in kept:
            with contextlib.suppress(docker.errors.APIError):
                volume.remove(force=True)


@pytest.fixture(autouse=True)
def _remove_test_scopes(client: docker.DockerClient, _remove_shared_scopes: None) -> Iterator[None]:
    """The cache volumes of the tests' own projects (scope `test...`) are removed after each test, the shared
    robot-policy project's after the session."""
    yield
    _remove_scopes(client, (ROBOPOLICY_SCOPE,))


@pytest.fixture(scope="session")
def _remove_shared_scopes(client: docker.DockerClient) -> Iterator[None]:
    yield
    _remove_scopes(client, ())


@pytest.fixture(scope="session")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """torchyard's wheel, built from this checkout once per session."""
    scratch = tmp_path_factory.mktemp("wheel")
    proc.run(["uv", "build", "--wheel", "--out-dir", str(scratch / "dist"), str(REPO)])
    (built,) = (scratch / "dist").glob("torchyard-*.whl")
    return built


@pytest.fixture(scope="session")
def local_base(client: docker.DockerClient) -> str:
    """The debootstrapped Debian base (made once per machine; reused when present)."""
    if not client.images.list(name=DEFAULT_TAG):
        make_base(DEFAULT_TAG)
    return DEFAULT_TAG


def copy_tree(target: Path) -> Path:
    """What an image build reads, copied so a test can change it without touching the checkout."""
    for item in TREE_ITEMS:
        source = REPO / item
        if source.is_dir():
            shutil.copytree(source, target / item, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            (target / item).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(source, target / item)
    return target


@pytest.fixture
def in_tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    tree = copy_tree(tmp_path / "tree")
    monkeypatch.chdir(tree)
    yield tree


@pytest.fixture(scope="session")
def cpu_index(tmp_path_factory: pytest.TempPathFactory) -> str:
    """`write_cpu_index` of `$TORCHYARD_TEST_CPU_WHEELS`; "" where that is unset: the real index is reachable."""
    if CPU_WHEELS not in os.environ:
        return ""
    try:
        return write_cpu_index(Path(os.environ[CPU_WHEELS]), tmp_path_factory.mktemp("pytorch-cpu"))
    except (FileNotFoundError, ValueError) as error:
        pytest.fail(f"${CPU_WHEELS}: {error}")


@pytest.fixture
def machine_env(local_base: str, cpu_index: str) -> dict[str, str]:
    """This machine's settings: the cpu entry on the local base; local wheel folders when set; PyTorch's CPU
    index (what `torchyard init` writes for CPU entries) as a local index. An adopter's `torchyard init` writes
    the exclude-newer of this repository's matrix (SOURCE_DATE_EPOCH), so its lock is the same on every run."""
    cutoff = tomllib.loads((REPO / "matrix.toml").read_text())["exclude-newer"]  # a TOML datetime
    epoch = str(int(cutoff.timestamp()))
    mirrors = with_index(os.environ.get("TORCHYARD_MIRRORS", ""), cpu_index) if cpu_index else ""
    settings = {"TORCHYARD_BASE_IMAGES": f"cpu={local_base}", "SOURCE_DATE_EPOCH": epoch}
    return {**os.environ, **settings, **({"TORCHYARD_MIRRORS": mirrors} if mirrors else {})}


# One cpu entry on a given base, resolved from PyPI up to a fixed date: what the registry and layer tests build.
ONE_ENTRY_MATRIX = """\
exclude-newer = 2026-11-01T00:00:00Z
[indexes]
pypi = "https://pypi.org/simple"
[accelerators.cpu]
base-image = "{base}"
indexes = ["pypi"]
runs-on = ["ubuntu-24.04"]
[[entry]]
name = "{entry}"
accelerator = "cpu"
python = "3.11"
requirements = {requirements}
"""


def one_entry_matrix(entry: str, base: str, requirements: list[str]) -> str:
    return ONE_ENTRY_MATRIX.format(entry=entry, base=base, requirements=json.dumps(requirements))


def remove_images(client: docker.DockerClient, *needles: str) -> None:
    """What a fresh runner lacks: every local tag containing one of `needles` (and images left untagged), and
    the dependency images (`torchyard/dependencies:<key>`) whose layers those images held."""
    keys: set[str] = set()
    for image in client.images.list():
        for tag in image.tags:
            if any(needle in tag for needle in needles):
                keys.update(image_keys(image.labels).values())
                client.images.remove(tag, force=True)
    for image in client.images.list(name=DEPENDENCY_REPOSITORY):
        for tag in image.tags:
            if tag.rpartition(":")[2] in keys:
                client.images.remove(tag, force=True)


@dataclass(frozen=True)
class LoopbackRegistry:
    """A real OCI registry (Debian's docker-registry) on 127.0.0.1, with basic auth (htpasswd)."""

    host: str
    username: str
    password: str

    @property
    def auth(self) -> dict[str, str]:
        return {"username": self.username, "password": self.password}


REGISTRY_CONFIG = """\
version: 0.1
log:
  level: warn
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: {root}/data
  delete:
    enabled: true
http:
  addr: 127.0.0.1:{port}
  secret: torchyard-test-{port}
auth:
  htpasswd:
    realm: torchyard-test
    path: {root}/htpasswd
"""


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextlib.contextmanager
def loopback_registry(password: str = "torchyard-test-pw-5c1e") -> Iterator[LoopbackRegistry]:
    """Start `docker-registry serve` on a free loopback port (Docker trusts loopback without TLS); stop
    it and remove its storage afterwards."""
    with tempfile.TemporaryDirectory(prefix="torchyard-registry-") as folder:
        root, port = Path(folder), _free_port()
        (root / "htpasswd").write_text("ci:" + bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=5)).decode())
        (root / "config.yml").write_text(REGISTRY_CONFIG.format(root=root, port=port))
        log = (root / "registry.log").open("wb")
        server = subprocess.Popen(["docker-registry", "serve", str(root / "config.yml")], stderr=log, stdout=log)
        try:
            for _ in range(100):
                try:
                    urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/", timeout=1)
                except urllib.error.HTTPError as error:
                    if error.code == 401:  # up, and asking for credentials
                        break
                except OSError:
                    time.sleep(0.1)
            else:
                raise RuntimeError(f"docker-registry did not start on port {port}")
            yield LoopbackRegistry(f"127.0.0.1:{port}", "ci", password)
        finally:
            server.terminate()
            server.wait(timeout=30)
            log.close()


@pytest.fixture(scope="module")
def registry() -> Iterator[LoopbackRegistry]:
    with loopback_registry() as running:
        yield running
