"""The build plan and the builder's argument list, without Docker."""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from torchyard.errors import CommandError, ImageBuildError
from torchyard.host.engine import DockerCli
from torchyard.image import plan as image_plan
from torchyard.image.builder import cache_sources, docker_build_args
from torchyard.image.buildkit import StepLines, explain_build_failure, failed_step_output, layer_steps
from torchyard.image.check import check_image
from torchyard.image.debootstrap import bootstrap_base
from torchyard.image.held import find_local
from torchyard.image.layers import Layer, layer_sizes
from torchyard.image.outcome import Built, how_built, layer_outcomes, layers_summary
from torchyard.image.plan import BuildOptions, BuildPlan, plan_build, resolve_base
from torchyard.image.policy import BuildPolicy
from torchyard.image.registry import PLAN_LABELS
from torchyard.matrix import load_plan
from torchyard.matrix.machine import Registry

REPO = Path(__file__).parents[2]
PLAN = load_plan(REPO / "matrix.toml")
PROJECT = "torchyard-0123abcd4567"
BUILDKIT = DockerCli("/usr/bin/docker", "20.10.24", "buildkit")
BUILDX = DockerCli("/usr/bin/docker", "28.2.2", "buildx")


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A copy of the lockfiles, so a test can change one."""
    shutil.copytree(REPO / "lockfiles", tmp_path / "lockfiles")
    return tmp_path


def make_plan(root: Path, **changes: str) -> BuildPlan:
    arguments: dict[str, Any] = {
        "project": PROJECT,
        "base_image": "torchyard/base:bookworm",
        "base_id": "sha256:" + "1" * 64,
        "uv_version": "0.13.9",
        "revision": "abc123",
        "source_date_epoch": "1700000000",
        **changes,
    }
    return plan_build(PLAN.entry("cpu"), root / "lockfiles", **arguments)


def test_plan_carries_entry_python_lock_and_labels(tree: Path) -> None:
    plan = make_plan(tree)
    args = dict(plan.build_args)
    assert args["PYTHON"] == "python3.11"
    context = dict(plan.context)
    assert context["lock.txt"] == (tree / "lockfiles" / "cpu.txt").read_bytes()
    assert context["Dockerfile"].startswith(b"# SHELL below")
    # docker/ is the one source of both (this checkout is an editable install: no copy in the package).
    docker = Path(__file__).parents[2] / "docker"
    assert context["Dockerfile"] == (docker / "Dockerfile").read_bytes()
    assert context[".dockerignore"] == (docker / ".dockerignore").read_bytes()
    allowed = [line[1:] for line in context[".dockerignore"].decode().splitlines() if line.startswith("!")]
    assert {name.split("/")[0] for name in context} - {"Dockerfile", ".dockerignore"} <= set(allowed)
    assert "inimage/torchyard/inimage/suites/test_parity.py" in context
    assert "inimage/torchyard/inimage/selftests/test_keys.py" in context
    assert "inimage/torchyard/names.py" in context and "inimage/torchyard/contract.py" in context
    assert not any(name.startswith("inimage/torchyard/commands/") for name in context)  # host side stays out
    assert plan.project_root is None
    assert args["VENDOR_PACKAGES"] == ""
    assert args["LOCK_DIGEST"].startswith("sha256:")
    assert args["GIT_REVISION"] == "abc123" and args["SOURCE_DATE_EPOCH"] == "1700000000"
    assert plan.tag.startswith(f"torchyard/{PROJECT}/cpu:") and len(plan.tag.split(":")[1]) == 64
    assert plan.alias == f"torchyard/{PROJECT}/cpu:latest"
    assert args["PROJECT_SCOPE"] == PROJECT  # its label: prune keeps images per project and entry
    # The lock's groups, one file each, and their keys as the image's label.
    assert [layer.name for layer in plan.layers] == ["torch", "pytorch", "numeric", "rest"]
    assert all(context[layer.path] == layer.text.encode() for layer in plan.layers)
    assert context["install-layer.sh"] == (docker / "install-layer.sh").read_bytes()
    assert args["LAYER_KEYS"] == " ".join(f"{layer.name}={layer.key}" for layer in plan.layers if layer.pins)


def test_rocm_plan_names_its_vendor_packages(tree: Path) -> None:
    rocm = plan_build(
        PLAN.entry("rocm"), tree / "lockfiles", project=PROJECT, base_image="b", base_id="i",
        uv_version="0.13.9", revision="r", source_date_epoch="0",
    )  # fmt: skip
    assert dict(rocm.build_args)["VENDOR_PACKAGES"] == "torch torchvision numpy triton"
    assert dict(rocm.build_args)["PYTHON"] == "python3.12"


def test_tag_is_content_addressed(tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = make_plan(tree).tag
    assert make_plan(tree, revision="other", source_date_epoch="1").tag == first  # labels only
    assert make_plan(tree, base_id="sha256:" + "2" * 64).tag != first
    lock = tree / "lockfiles" / "cpu.txt"
    lock.write_text(lock.read_text() + "\n")
    second = make_plan(tree).tag
    assert second != first
    monkeypatch.setattr(image_plan, "dockerfile", lambda: b"FROM scratch\n")
    assert make_plan(tree).tag != second


def test_two_projects_entries_of_one_name_share_no_tag_no_alias_and_no_uv_cache(tree: Path) -> None:
    """Two adopters with a `cpu` entry on one runner: neither reuses, moves or reads the other's image (a trusted
    build reads its alias for the base check and the layer cache), nor its uv cache: the cache mount's id, the
    project's, is part of the builder's key for each dependency layer (issue 57, route 8). The layers' own keys
    name the pins and what lies below them, not the project: the same pins hold the same bytes, so an untrusted
    build of either stands on a trusted dependency image of those pins."""
    ours, theirs = make_plan(tree), make_plan(tree, project="nanogpt-89ab01234567")
    assert ours.tag.partition(":")[0] == f"torchyard/{PROJECT}/cpu"
    assert theirs.tag.partition(":")[0] == "torchyard/nanogpt-89ab01234567/cpu"
    assert theirs.alias == "torchyard/nanogpt-89ab01234567/cpu:latest" != ours.alias
    assert b"--mount=type=cache" not in dict(theirs.context)["Dockerfile"]
    assert [a.key for a in theirs.layers] == [b.key for b in ours.layers]
    assert theirs.dependency_tag == ours.dependency_tag


def test_base_override_by_entry_then_accelerator() -> None:
    cpu = PLAN.entry("cpu")
    assert resolve_base(cpu, {}) == str(cpu.accelerator.base_image)
    assert resolve_base(cpu, {"cpu": "local/base:1"}) == "local/base:1"
    assert resolve_base(PLAN.entry("cuda"), {"cpu": "local/base:1"}).startswith("docker.io/library/ubuntu")


def test_buildkit_args(tree: Path) -> None:
    plan = make_plan(tree)
    args = docker_build_args(
        plan,
        BUILDKIT,
        context=Path("/ctx"),
        iidfile=Path("/tmp/iid"),
        secrets={"uv-index-args": Path("/tmp/a"), "cacert": Path("/etc/ca.crt")},
        host_network=True,
        options=BuildOptions(cache_from=("type=registry,ref=r/c",)),
    )
    assert args[:8] == (
        "/usr/bin/docker",
        "build",
        "--file",
        "/ctx/Dockerfile",
        "--progress",
        "plain",
        "--iidfile",
        "/tmp/iid",
    )
    assert args[args.index("--secret") : args.index("--secret") + 2] == ("--secret", "id=cacert,src=/etc/ca.crt")
    assert "id=uv-index-args,src=/tmp/a" in args
    assert args[-5:] == ("--network", "host", "--cache-from", "type=registry,ref=r/c", "/ctx")
    assert "--tag" not in args  # tagged only after the build succeeds


def test_buildx_loads_into_the_engine_and_exports_cache(tree: Path) -> None:
    """Both builders leave the image in the engine; pushing is a separate step, the same for both."""
    plan = make_plan(tree)
    common = {"context": Path("/c"), "iidfile": Path("/i"), "secrets": {}, "host_network": False}
    loaded = docker_build_args(plan, BUILDX, options=BuildOptions(), **common)  # type: ignore[arg-type]
    assert loaded[:3] == ("/usr/bin/docker", "buildx", "build") and loaded[-2:] == ("--load", "/c")
    exported = docker_build_args(plan, BUILDX, options=BuildOptions(push=True, cache_to=("type=gha",)), **common)  # type: ignore[arg-type]
    assert exported[-4:] == ("--cache-to", "type=gha", "--load", "/c") and "--push" not in exported


def test_cache_export_needs_buildx_but_push_does_not(tree: Path) -> None:
    common = {"context": Path("/c"), "iidfile": Path("/i"), "secrets": {}, "host_network": False}
    pushed = docker_build_args(make_plan(tree), BUILDKIT, options=BuildOptions(push=True), **common)  # type: ignore[arg-type]
    assert "--push" not in pushed and "--load" not in pushed
    with pytest.raises(ImageBuildError, match="--cache-to needs `docker buildx`"):
        docker_build_args(make_plan(tree), BUILDKIT, options=BuildOptions(cache_to=("type=gha",)), **common)  # type: ignore[arg-type]


def test_cache_sources_are_this_runner_then_the_registry(tree: Path) -> None:
    plan = make_plan(tree)
    registry = Registry("127.0.0.1:5000/team")
    assert cache_sources(plan, BuildOptions(), None, local_alias=False).cache_from == ()
    assert cache_sources(plan, BuildOptions(), registry, local_alias=True).cache_from == (
        plan.alias,
        f"127.0.0.1:5000/team/{plan.alias}",
    )
    named = BuildOptions(cache_from=("type=gha",))
    assert cache_sources(plan, named, registry, local_alias=True) == named  # what the caller named wins


# BuildKit's plain output as a registry-cache build prints it: two groups cached (their blobs pulled), one built.
BUILD_LOG = """\
#11 [image  3/17] RUN --mount=type=cache,target=/root/.cache/uv --mount=type=secret,id=cacert \
--mount=type=secret,id=uv-index-args     bash /opt/torchyard/install-layer.sh torch
#11 CACHED

#13 [image  5/17] RUN --mount=type=cache,target=/root/.cache/uv --mount=type=secret,id=cacert \
--mount=type=secret,id=uv-index-args     bash /opt/torchyard/install-layer.sh pytorch
#13 {pytorch}

#15 [image  7/17] RUN --mount=type=cache,target=/root/.cache/uv --mount=type=secret,id=cacert \
--mount=type=secret,id=uv-index-args     bash /opt/torchyard/install-layer.sh rest
#15 0.512 Prepared 1 package in 32ms
#15 0.579  + six==1.16.0
#15 DONE 0.8s
""".replace("\\\n", "")
PULLED = "#13 pulling sha256:ad152ac8cb058593fd2dc8a9d8833ed4f24154f2e031bf8a874d47524a9eede7 1.3s done\n"


def test_how_built_reads_each_dependency_layer() -> None:
    log = BUILD_LOG.replace("{pytorch}", "CACHED")
    assert layer_steps(log) == {"torch": True, "pytorch": True, "rest": False}
    assert how_built(log) == "cache"
    assert how_built(BUILD_LOG.replace("{pytorch}", "DONE 3.1s").replace("#11 CACHED", "#11 DONE 9.0s")) == "cold"
    assert how_built("") == "cold"


def _layers() -> tuple[Layer, ...]:
    groups = (
        ("torch", ("torch==2.14.1",)),
        ("pytorch", ("torchao==0.18.0",)),
        ("numeric", ()),
        ("rest", ("six==1.16.0",)),
    )
    return tuple(Layer(name, pins, "", key=f"{index:016x}") for index, (name, pins) in enumerate(groups))


def test_each_layer_is_reused_pulled_or_built_with_its_size() -> None:
    run = "|3 VENDOR_PACKAGES= /bin/bash -e -c bash /opt/torchyard/install-layer.sh"
    history = [
        {"CreatedBy": f"{run} torch # buildkit", "Size": 7},
        {"CreatedBy": "COPY layers/torch.txt /opt/torchyard/layers/torch.txt # buildkit", "Size": 276},
        {"CreatedBy": f"{run} pytorch # buildkit", "Size": 5},
        {"CreatedBy": f"{run} rest # buildkit", "Size": 3},
    ]  # fmt: skip
    assert layer_sizes(history) == {"torch": 7, "pytorch": 5, "rest": 3}
    cached = BUILD_LOG.replace("{pytorch}", "CACHED")
    # This runner held torch's layer (an image of its carries that key); pytorch's came from the registry.
    outcomes = layer_outcomes(_layers(), cached + PULLED, history, frozenset({f"{0:016x}"}))
    assert [(o.group, o.packages, o.size_bytes, o.how) for o in outcomes] == [
        ("torch", 1, 7, "reused"),
        ("pytorch", 1, 5, "pulled"),
        ("rest", 1, 3, "built"),
    ]  # the empty numeric group has no layer to speak of
    # Nothing pulled: a cached layer came from this runner's build cache, whatever its images hold.
    assert [o.how for o in layer_outcomes(_layers(), cached, history, frozenset())] == ["reused", "reused", "built"]
    built = Built("cpu", "torchyard/cpu:1", 10, 1.0, "cache", layers=outcomes)
    assert layers_summary([built])[1] == ("cpu", "pytorch", "1", "0.0 MB", "pulled")
    assert layers_summary([Built("cpu", "torchyard/cpu:1", 10, 1.0, "local")]) == []


def test_an_unreadable_lockfile_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "cpu.txt").mkdir()
    with pytest.raises(ImageBuildError, match=r"entry 'cpu': the lockfile .*cpu.txt: not a regular file"):
        plan_build(
            PLAN.entry("cpu"), tmp_path, project=PROJECT, base_image="b", base_id="i", uv_version="0.13.9",
            revision="r", source_date_epoch="0",
        )  # fmt: skip


UNREACHABLE_LOG = """\
#3 [internal] load metadata for docker.io/library/debian:bookworm-slim@sha256:{digest}
#3 ERROR: failed to do request: Head "https://registry-1.docker.io/v2/library/debian/manifests/sha256:{digest}": \
dial tcp: lookup registry-1.docker.io on 10.255.255.53:53: no such host
failed to solve with frontend dockerfile.v0: failed to create LLB definition: dial tcp: lookup registry-1.docker.io: \
no such host
"""


def test_an_unreachable_registry_is_one_line_with_the_fix(tree: Path) -> None:
    entry = PLAN.entry("cpu")
    plan = make_plan(tree, base_image=str(entry.accelerator.base_image))
    output = UNREACHABLE_LOG.format(digest=entry.accelerator.require_base_image().digest.removeprefix("sha256:"))
    message = explain_build_failure(entry, plan, CommandError("docker failed", 1, output))
    assert message.startswith(f"entry 'cpu': cannot pull base image {entry.accelerator.base_image}: the registry is")
    assert "`nox -s base-image`" in message and "TORCHYARD_BASE_IMAGES=cpu=torchyard/base:bookworm" in message
    base = entry.accelerator.base_image
    absent = f"#3 [internal] load metadata for {base}\n#3 ERROR: {base}: not found\n"
    missing = explain_build_failure(entry, plan, CommandError("docker failed", 1, absent))
    assert "is not in its registry" in missing and "`nox -s refresh`" in missing
    # A RUN step that fails for a missing command prints "not found": that step's, never the base's.
    step_missing = (
        f"#2 [internal] load metadata for {base}\n#2 DONE 0.0s\n#5 [toolchain 1/3] FROM {base}\n#5 CACHED\n"
        "#17 [dependencies 9/10] RUN /bin/bash /opt/torchyard/install-layer.sh rest\n"
        "#17 0.215 /opt/torchyard/install-layer.sh: line 33: /opt/torchyard/tools/bin/uv: not found\n"
        "#17 ERROR: executor failed running [/bin/bash -c install-layer.sh rest]: exit code: 127\n"
    )
    blamed = explain_build_failure(entry, plan, CommandError("docker failed", 1, step_missing))
    assert "is not in its registry" not in blamed and "tools/bin/uv: not found" in blamed
    other = explain_build_failure(entry, plan, CommandError("docker failed", 1, "#9 ERROR: process did not complete\n"))
    assert other == "entry 'cpu': the image build failed: #9 ERROR: process did not complete"
    # The failing step's own last line, not BuildKit's echo of the whole command (which names the messages
    # torchyard's steps print, so those are matched only as printed output).
    step = (
        '#11 [stage-0 7/13] RUN if ! getent passwd "1000"; then useradd ...; fi; echo "image check: x"\n'
        "#11 0.085 useradd: UID 1000 is not unique\n"
        '#11 ERROR: executor failed running [/bin/bash -e -o pipefail -c useradd ... echo "image check: x"]\n'
    )
    failed = explain_build_failure(entry, plan, CommandError("docker failed", 1, step))
    assert failed == "entry 'cpu': the image build failed: useradd: UID 1000 is not unique"
    check = step.replace("useradd: UID 1000 is not unique", "image check: missing g++")
    assert explain_build_failure(entry, plan, CommandError("docker failed", 1, check)).endswith(
        ": image check: missing g++"
    )


STEPS_LOG = """\
#1 [internal] load build definition from Dockerfile
#1 transferring dockerfile: 2.31kB done
#1 DONE 0.0s
#7 [dependencies 3/9] RUN /opt/torchyard/install-layer.sh torch
#7 0.412 Using CPython 3.11.2 interpreter at: /usr/bin/python3.11
#7 3.118 Downloading torch (190.1MiB)
#7 41.20 Prepared 2 packages in 40.72s
#7 41.53 Installed 2 packages in 311ms
#7 41.53  + torch==2.13.0+cpu
#7 DONE 44.1s
#8 [dependencies 4/9] RUN /opt/torchyard/install-layer.sh rest
#8 CACHED
#9 [image 7/9] RUN useradd --uid 1000 torchyard
#9 0.085 useradd: UID 1000 is not unique
#9 ERROR: executor failed running [/bin/sh -c useradd --uid 1000 torchyard]: exit code: 4
------
 > [image 7/9] RUN useradd --uid 1000 torchyard:
------
"""


def test_a_build_shows_each_steps_start_and_end_and_uvs_summaries() -> None:
    """A 7 GB install prints thousands of lines: a build shows each step's first line, its end and uv's
    summaries; a failing step's every line comes back for the error (`failed_step_output`)."""
    shown = StepLines()
    lines = STEPS_LOG.splitlines(keepends=True)
    assert [line.rstrip() for line in lines if shown(line)] == [
        "#1 [internal] load build definition from Dockerfile",
        "#1 DONE 0.0s",
        "#7 [dependencies 3/9] RUN /opt/torchyard/install-layer.sh torch",
        "#7 41.20 Prepared 2 packages in 40.72s",
        "#7 41.53 Installed 2 packages in 311ms",
        "#7 DONE 44.1s",
        "#8 [dependencies 4/9] RUN /opt/torchyard/install-layer.sh rest",
        "#8 CACHED",
        "#9 [image 7/9] RUN useradd --uid 1000 torchyard",
        "#9 ERROR: executor failed running [/bin/sh -c useradd --uid 1000 torchyard]: exit code: 4",
        "------",
        " > [image 7/9] RUN useradd --uid 1000 torchyard:",
        "------",
    ]
    assert failed_step_output(STEPS_LOG).splitlines() == [
        "#9 [image 7/9] RUN useradd --uid 1000 torchyard",
        "#9 0.085 useradd: UID 1000 is not unique",
        "#9 ERROR: executor failed running [/bin/sh -c useradd --uid 1000 torchyard]: exit code: 4",
    ]
    assert failed_step_output(STEPS_LOG.replace("#9 ERROR", "#9 DONE")) == ""


def test_the_plan_names_the_accelerators_system_packages_and_image_checks(tree: Path) -> None:
    (tree / "lockfiles" / "xpu.txt").write_text("# no lock for xpu is made here (its index is unreachable)\n")
    xpu = plan_build(
        PLAN.entry("xpu"), tree / "lockfiles", project=PROJECT, base_image="b", base_id="i",
        uv_version="0.13.9", revision="r", source_date_epoch="0",
    )  # fmt: skip
    args = dict(xpu.build_args)
    assert args["SYSTEM_PACKAGES"] == " ".join(PLAN.entry("xpu").accelerator.system_packages)
    assert args["IMAGE_CHECKS"].split()[-3:] == ["level-zero-loader", "level-zero-driver", "level-zero-headers"]
    assert dict(make_plan(tree).build_args)["IMAGE_CHECKS"] == "gcc python-headers torch-companions"


def test_an_untrusted_build_has_its_own_cache_scope_tag_and_alias(tree: Path) -> None:
    trusted = make_plan(tree)
    untrusted = plan_build(
        PLAN.entry("cpu"), tree / "lockfiles", project=PROJECT, base_image="torchyard/base:bookworm",
        base_id="sha256:" + "1" * 64, uv_version="0.13.9", revision="abc123", source_date_epoch="1700000000",
        policy=BuildPolicy(trusted=False),
    )  # fmt: skip
    assert b"--mount=type=cache" not in dict(untrusted.context)["Dockerfile"]
    assert untrusted.tag != trusted.tag
    assert trusted.alias == f"torchyard/{PROJECT}/cpu:latest"
    assert untrusted.alias == f"torchyard/{PROJECT}/cpu:untrusted"
    # its layers come from the trusted alias only: one pull request's layers never feed the next one's build
    registry = Registry("127.0.0.1:5000/team")
    sources = cache_sources(untrusted, BuildOptions(), registry, local_alias=True).cache_from
    assert sources == (trusted.alias, f"127.0.0.1:5000/team/{trusted.alias}")


def test_an_untrusted_build_stands_on_the_trusted_dependency_image_of_the_same_pins(tree: Path) -> None:
    trusted = make_plan(tree)
    args: dict[str, Any] = dict(
        project=PROJECT, base_image="torchyard/base:bookworm", base_id="sha256:" + "1" * 64, uv_version="0.13.9",
        revision="abc123", source_date_epoch="1700000000", policy=BuildPolicy(trusted=False),
    )  # fmt: skip
    alone = plan_build(PLAN.entry("cpu"), tree / "lockfiles", **args)
    standing = plan_build(
        PLAN.entry("cpu"), tree / "lockfiles", **args, stands_on=(trusted.dependency_tag, "sha256:d1")
    )
    again = plan_build(PLAN.entry("cpu"), tree / "lockfiles", **args, stands_on=(trusted.dependency_tag, "sha256:d2"))
    # The image stage starts from the trusted dependency image; the groups are keyed as the trusted build's.
    assert dict(standing.build_args)["DEPENDENCIES"] == trusted.dependency_tag
    assert trusted.dependency_tag == f"torchyard/dependencies:{trusted.layers[-1].key}"
    assert [layer.key for layer in standing.layers] == [layer.key for layer in trusted.layers]
    assert [layer.key for layer in alone.layers] != [layer.key for layer in trusted.layers]
    assert "DEPENDENCIES" not in dict(alone.build_args) and standing.stands_on == "sha256:d1"
    # Its own tag, and another one for another dependency image under the same tag name.
    assert len({trusted.tag, alone.tag, standing.tag, again.tag}) == 4
    dockerfile = dict(standing.context)["Dockerfile"].decode()
    assert "ARG DEPENDENCIES=dependencies" in dockerfile.partition("FROM ")[0]  # global: FROM may read it
    image_stage = dockerfile.partition("FROM ${DEPENDENCIES} AS image")[2]
    assert image_stage and "--mount=type=cache" not in image_stage
    assert not re.search(r"install-layer\.sh (torch|pytorch|numeric|rest)\b", image_stage)  # no group of the lock


def test_no_build_mounts_a_uv_cache_and_uv_keeps_none_in_a_layer() -> None:
    """Route 8 of issue 57: a uv cache mount shared by trust alone let one approved pull request's build fill the
    cache the next pull request's build read, and every project's trusted builds on an engine shared one. No
    step mounts a cache now (a planted one is refused), and uv keeps no cache in the layer it writes."""
    docker = Path(__file__).parents[2] / "docker"
    assert b"--mount=type=cache" not in (docker / "Dockerfile").read_bytes()
    installer = (docker / "install-layer.sh").read_text()
    assert '--no-deps --no-config --no-cache "$@"' in installer
    planted = b"RUN --mount=type=cache,target=/root/.cache/uv true\n"
    with pytest.raises(ImageBuildError, match="mounts a build cache"):
        image_plan.checked_dockerfile(planted)


class FakeImage:
    def __init__(self, labels: dict[str, str] | None = None) -> None:
        self.tags: list[str] = []
        self.attrs = {"Size": 1}
        self.labels = labels or {}

    def tag(self, repository: str, tag: str | None = None) -> None:
        self.tags.append(repository if tag is None else f"{repository}:{tag}")


class FakeImages:
    def __init__(self, image: FakeImage) -> None:
        self.image = image

    def get(self, name: str) -> FakeImage:
        return self.image


class FakeClient:
    def __init__(self, image: FakeImage) -> None:
        self.images = FakeImages(image)


def plan_labels(plan: BuildPlan) -> dict[str, str]:
    """The labels the Dockerfile gives an image of `plan` that a run checks before reusing it."""
    args = dict(plan.build_args)
    return {label: args.get(arg, "") for label, arg in PLAN_LABELS}


def test_an_untrusted_run_reuses_a_trusted_image_without_moving_its_alias(tree: Path) -> None:
    plan = make_plan(tree)
    image = FakeImage(plan_labels(plan))
    client: Any = FakeClient(image)
    assert find_local(PLAN.entry("cpu"), [plan], client, policy=BuildPolicy(trusted=False)) is not None
    assert image.tags == []
    find_local(PLAN.entry("cpu"), [plan], client)
    assert image.tags == [f"torchyard/{PROJECT}/cpu:latest"]


@pytest.mark.parametrize(
    "forged",
    [
        {},  # an image of someone else's, tagged with the plan's tag (the review tagged a bare base so)
        {"dev.torchyard.wheels-only": "1"},  # an untrusted build's, under a tag that collides with a trusted one
        {"dev.torchyard.content": "0" * 64},  # another content whose shortened digest is the plan's
    ],
)
def test_an_image_under_the_plans_tag_is_run_only_where_its_labels_say_it_is_the_plans(
    tree: Path, forged: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    plan = make_plan(tree)
    image = FakeImage({**plan_labels(plan), **forged} if forged else {})
    client: Any = FakeClient(image)
    for policy in (BuildPolicy(trusted=True), BuildPolicy(trusted=False)):
        assert find_local(PLAN.entry("cpu"), [plan], client, policy=policy) is None
    assert image.tags == []  # no alias moved onto it
    assert "is not what its plan builds" in capsys.readouterr().err
    assert dict(plan.build_args)["CONTENT_DIGEST"] == plan.tag.rpartition(":")[2]  # the tag is the digest, whole


def test_the_built_images_checks_run_sealed_and_fail_in_their_own_words() -> None:
    def failing(args: Sequence[str], **kwargs: object) -> Any:
        assert "--network" in args and args[list(args).index("--network") + 1] == "none"
        assert "-I" in args[-3]  # isolated Python: the check only reads
        raise CommandError("docker failed", 1, "+ ...\nvendor guard: vendor package torch 2.9 was replaced\n")

    with pytest.raises(ImageBuildError) as caught:
        check_image(
            "cpu", "sha256:abc", ("gcc",), name="n", user="1000:1000", docker_path="docker", runner=failing, env={}
        )
    assert (
        str(caught.value) == "entry 'cpu': the image build failed: vendor guard: vendor package torch 2.9 was replaced"
    )


def _bootstrap(found: set[str]) -> list[tuple[str, ...]]:
    calls: list[tuple[str, ...]] = []

    def runner(args: Sequence[str], **_: Any) -> subprocess.CompletedProcess[str]:
        calls.append(tuple(args))
        return subprocess.CompletedProcess(args, 0, stdout="sha256:made\n", stderr="")

    cli = DockerCli("/usr/bin/docker", "27.5.1", "buildkit")
    assert bootstrap_base(cli, runner=runner, env={}, which=lambda name: name if name in found else None) == (
        "sha256:made"
    )
    return calls


def test_the_base_is_mmdebstraps_archive_where_it_is_installed_else_debootstraps_packed() -> None:
    fast = _bootstrap({"mmdebstrap", "debootstrap"})
    assert [call[0] for call in fast] == ["mmdebstrap", "/usr/bin/docker"]
    assert fast[0][-3] == "bookworm" and fast[0][-2] == fast[1][2]  # the archive it writes is what is imported
    slow = _bootstrap({"debootstrap"})
    assert [call[0] for call in slow] == ["debootstrap", "tar", "/usr/bin/docker"]
    assert slow[1][-3:] == ("-cf", slow[2][2], ".")  # the packed root filesystem is what is imported
    assert fast[0][1:3] == slow[0][1:3]  # the same variant and packages either way
