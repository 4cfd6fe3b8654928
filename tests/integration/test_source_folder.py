"""A repository without a package (karpathy/nanoGPT's shape: modules and scripts at the top, a requirements.txt,
no pyproject.toml), end to end from the built wheel: `torchyard init` writes a source-folder entry, `nox -s lock`
locks its requirements file with hashes, `nox -s test-cpu` runs its own tests and its cases in the image, where
its modules import from any folder (`--local` puts the folder on its venv's path the same way: unit-tested in
test_run.py, as a venv of the lock costs minutes here). The repository is written here (a tiny GPT of this
test's own): nothing of nanoGPT is copied.
"""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path

import docker
import pytest

from tests.integration.test_adopter import run_in
from torchyard.image.plan import image_repository
from torchyard.trust import project_scope
from torchyard.util import proc

pytestmark = pytest.mark.integration

MODEL = '''\
"""A GPT small enough for a test: token and position embeddings, one causal attention block, a head."""

from dataclasses import dataclass

import torch
from torch import nn


@dataclass
class GPTConfig:
    vocab_size: int = 64
    block_size: int = 16
    n_embd: int = 32
    n_head: int = 4


class GPT(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.config = config
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)
        self.wpe = nn.Embedding(config.block_size, config.n_embd)
        self.ln = nn.LayerNorm(config.n_embd)
        self.qkv = nn.Linear(config.n_embd, 3 * config.n_embd)
        self.proj = nn.Linear(config.n_embd, config.n_embd)
        self.head = nn.Linear(config.n_embd, config.vocab_size, bias=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        batch, length = idx.shape
        x = self.wte(idx) + self.wpe(torch.arange(length, device=idx.device))
        q, k, v = self.qkv(self.ln(x)).split(self.config.n_embd, dim=2)
        heads = self.config.n_head
        q, k, v = (t.view(batch, length, heads, -1).transpose(1, 2) for t in (q, k, v))
        y = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(batch, length, -1))
        return self.head(x)
'''
TRAIN = "from model import GPT, GPTConfig\n\nprint(GPT(GPTConfig()))\n"
CASES = '''\
"""The repository's parity case: a module beside model.py, named in matrix.toml's `cases`."""

import torch
from torchyard.cases import Case

from model import GPT, GPTConfig


def tokens(generator: torch.Generator) -> tuple[torch.Tensor]:
    return (torch.randint(0, 64, (2, 16), generator=generator),)


CASES = [Case("tinygpt", lambda: GPT(GPTConfig()), tokens, backends=("eager", "export"))]
'''
TESTS = '''\
import os
import subprocess
import sys

import numpy
import torch

from model import GPT, GPTConfig


def test_logits_have_the_vocabulary_on_the_last_axis():
    logits = GPT(GPTConfig())(torch.zeros(1, 8, dtype=torch.long))
    assert logits.shape == (1, 8, 64) and numpy.isfinite(logits.detach().numpy()).all()


def test_the_modules_import_from_any_folder(tmp_path):
    """Not through the working folder, nor xdist's PYTHONPATH: the folder is on every interpreter's path."""
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    subprocess.run([sys.executable, "-c", "import model, train"], cwd=tmp_path, env=env, check=True)
'''


def source_repository(tmp_path: Path) -> tuple[Path, Path]:
    """The repository, a git work tree with everything added, and a host file a committed link points at."""
    root = tmp_path / "tinyGPT"
    (root / "tests").mkdir(parents=True)
    (root / "model.py").write_text(MODEL)
    (root / "train.py").write_text(TRAIN)
    (root / "torchyard_cases.py").write_text(CASES)
    (root / "tests" / "test_model.py").write_text(TESTS)
    (root / "requirements.txt").write_text("numpy  # what the tests compare with\n")
    (root / ".dockerignore").write_text("data/\n")
    (root / "data").mkdir()
    (root / "data" / "input.txt").write_text("a corpus that never goes into the image\n")
    host_secret = tmp_path / "host-only" / "id_rsa"
    host_secret.parent.mkdir()
    host_secret.write_text(f"host secret {uuid.uuid4()}\n")
    (root / "checkpoint.pt").symlink_to(host_secret)
    proc.run(["git", "init", "--quiet"], cwd=root)
    proc.run(["git", "add", "--all"], cwd=root)
    return root, host_secret


def adopt(root: Path, wheel: Path, env: dict[str, str]) -> tuple[Path, str]:
    """torchyard from the wheel in a venv of the repository, `init`, the entry narrowed to the repository's own
    case and two suites (the built-in corpus costs minutes), then `nox -s lock`. The venv's bin folder and what
    init said."""
    venv = root / ".venv"
    proc.run(["uv", "venv", "--quiet", "--python", "3.11", str(venv)], env=env)
    proc.run(["uv", "pip", "install", "--quiet", "--python", str(venv / "bin" / "python"), str(wheel)], env=env)
    bindir = venv / "bin"
    said = run_in(root, bindir, ["torchyard", "init", "--torchyard-spec", "torchyard==0.1.0"], env)
    matrix = root / "matrix.toml"
    text = matrix.read_text()
    assert '\nproject = { source = ".", requirements-files = ["requirements.txt"] }\ntests = ["tests"]\n' in text
    text = text.replace("builtin-cases = true", "builtin-cases = false")
    text = text.replace('# cases = ["torchyard_cases"]', 'cases = ["torchyard_cases"]')
    text = re.sub(r"(?m)^suites = .*$", 'suites = ["export", "parity"]', text)
    matrix.write_text(text)
    proc.run(["git", "add", "--all"], cwd=root)
    run_in(root, bindir, ["nox", "-s", "lock"], env)
    return bindir, said


def test_a_repository_without_a_package_end_to_end_in_its_image(
    wheel: Path, tmp_path: Path, machine_env: dict[str, str], client: docker.DockerClient
) -> None:
    root, host_secret = source_repository(tmp_path)
    bindir, said = adopt(root, wheel, machine_env)
    assert "no package here (no pyproject.toml [project])" in said and "requirements.txt joins its lock" in said
    lock = (root / "lockfiles" / "cpu.txt").read_text()
    assert re.search(r"(?m)^numpy==\S+ \\$", lock) and "--hash=sha256:" in lock  # locked with hashes

    run_in(root, bindir, ["nox", "-s", "test-cpu"], machine_env)
    reports = root / "reports" / "cpu"
    results = json.loads((reports / "parity.json").read_text())["results"]
    passed = {(r["case"], r["backend"]) for r in results if r["outcome"] == "passed"}
    assert {("tinygpt", "eager"), ("tinygpt", "export")} <= passed
    junit = (reports / "junit.xml").read_text()
    for name in ("test_logits_have_the_vocabulary_on_the_last_axis", "test_the_modules_import_from_any_folder"):
        assert f'name="{name}"' in junit
    assert "<failure" not in junit and "<error" not in junit

    scope = project_scope(root / "matrix.toml", machine_env)  # as the CLI names the project
    image = client.images.get(f"{image_repository(scope, 'cpu')}:latest")
    try:
        assert image.labels["dev.torchyard.scope"] == scope and image.labels["dev.torchyard.project"] == "tinygpt"
        python = ["/opt/torchyard/venv/bin/python"]
        code = "import json, os, model; print(model.__file__); print(json.dumps(sorted(os.listdir('/workspace'))))"
        shown = client.containers.run(image, ["-c", code], entrypoint=python, working_dir="/", remove=True)
        where, listing = bytes(shown).decode().strip().splitlines()
        assert where == "/workspace/model.py"  # imported from / : the folder is on the path, not only the cwd
        # The folder as git has it: no data/ (.dockerignore), no .git, no .venv.
        assert json.loads(listing) == [
            ".dockerignore", ".github", ".gitignore", "checkpoint.pt", "lockfiles", "matrix.toml", "model.py",
            "noxfile.py", "requirements.txt", "tests", "torchyard_cases.py", "train.py",
        ]  # fmt: skip
        linked = client.containers.run(
            image, ["-c", "import os; p = '/workspace/checkpoint.pt'; print(os.readlink(p), os.path.exists(p))"],
            entrypoint=python, remove=True,
        )  # fmt: skip
        assert bytes(linked).decode().split() == [str(host_secret), "False"]  # a link, dangling: the secret stayed
        wheels = client.containers.run(image, ["ls", "/opt/torchyard/project"], entrypoint=[], remove=True)
        assert bytes(wheels).decode().strip() == ""  # nothing was built
    finally:
        for built in client.images.list(filters={"label": f"dev.torchyard.scope={scope}"}):
            client.images.remove(str(built.id), force=True)
