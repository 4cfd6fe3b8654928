"""Build an entry's image from its plan, in order: what an untrusted build may use, the base and the disk, the
local folders served, the toolchain stage and the project's wheel (sealed), the image, its checks, and the
dependency stage tagged for untrusted builds to stand on. The build writes an image ID file and only then is
the image tagged: an interrupted build leaves no tag pointing at a half-built image.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import docker
import docker.errors

from torchyard.accelerators import ACCELERATORS
from torchyard.errors import ImageBuildError
from torchyard.host.engine import DockerCli
from torchyard.image.builder import build_secrets, cache_sources, docker_build_args, run_build, stage_context
from torchyard.image.check import check_image
from torchyard.image.held import Held
from torchyard.image.outcome import Built, Origin, how_built, layer_outcomes
from torchyard.image.plan import NO_OPTIONS, BuildOptions, BuildPlan
from torchyard.image.policy import TRUSTED, BuildPolicy, build_sources
from torchyard.image.preflight import check_base, check_free_disk
from torchyard.image.serve import bridge_address, served
from torchyard.image.wheel import build_wheel_sealed
from torchyard.matrix.machine import Registry, Source
from torchyard.matrix.schema import Entry
from torchyard.seal import run_user
from torchyard.util import proc


def build_image(
    entry: Entry,
    plan: BuildPlan,
    client: docker.DockerClient,
    cli: DockerCli,
    *,
    held: Held,
    options: BuildOptions = NO_OPTIONS,
    registry: Registry | None = None,
    policy: BuildPolicy = TRUSTED,
    sources: Sequence[Source],
    runner: proc.Runner = proc.run,
    env: Mapping[str, str] = os.environ,
) -> Built:
    """Build `plan`'s image (taking layers from the registry's cache, installing from `sources`: the entry's
    indexes as this machine reaches them) on an engine that holds `held`. The base is checked before the
    first layer (the caller has checked the lock and looked for the image: `image.obtain`)."""
    started = time.monotonic()
    sources = build_sources(entry, policy, sources)
    check_base(client, plan, held, docker_path=cli.path, runner=runner, env=env)
    check_free_disk(plan, held)
    with (
        tempfile.TemporaryDirectory(prefix="torchyard-build-") as scratch,
        served(sources, bridge_address(client.networks)) as (reachable, host_network),
    ):
        if host_network and not policy.trusted:
            raise ImageBuildError(
                f"entry {entry.name!r}: an untrusted build never gets the host's network, and this machine's local "
                "wheel folders are served on loopback only (the engine's default bridge is not an address here)"
            )
        options = cache_sources(plan, options, registry, held.trusted_alias)
        context = Path(scratch) / "context"
        stage_context(plan, context)
        iidfile = Path(scratch) / "iid"
        secrets, ca_bundle = build_secrets(Path(scratch), reachable, env)

        def builder(iid: Path, target: str | None = None) -> tuple[str, ...]:
            return docker_build_args(
                plan, cli, context=context, iidfile=iid, secrets=secrets, host_network=host_network,
                options=options, target=target,
            )  # fmt: skip

        if plan.project_root is not None:
            toolchain = Path(scratch) / "toolchain-iid"
            run_build(entry, plan, builder(toolchain, "toolchain"), cli=cli, registry=registry, runner=runner, env=env)
            build_wheel_sealed(
                entry.name, plan.project_files, context / "project", requires=plan.build_requires,
                image=toolchain.read_text().strip(), docker_path=cli.path, sources=reachable,
                host_network=host_network, ca_bundle=ca_bundle, runner=runner, env=env,
            )  # fmt: skip
        args = builder(iidfile)
        print(f"building {plan.tag} for entry {entry.name!r} from {plan.base_image}", file=sys.stderr, flush=True)
        completed = run_build(entry, plan, args, cli=cli, registry=registry, runner=runner, env=env)
        image_id = iidfile.read_text().strip() if iidfile.exists() else ""
        checks = ACCELERATORS[entry.accelerator.name].IMAGE_CHECKS
        check_image(
            entry.name, image_id, checks, name=f"torchyard-{entry.name}-{os.urandom(4).hex()}",
            user=run_user(os.getuid(), os.getgid()), docker_path=cli.path, runner=runner, env=env,
        )  # fmt: skip
        if plan.project_root is not None:  # the toolchain stage's untagged image: its layers stay in the image
            with contextlib.suppress(docker.errors.APIError):
                client.images.remove(toolchain.read_text().strip())
        if policy.trusted and plan.dependency_tag and not held.dependency:
            # The dependencies stage again, every layer cached: tagged, an untrusted build stands on it.
            dependencies = Path(scratch) / "dependencies-iid"
            tagging = builder(dependencies, "dependencies")
            run_build(entry, plan, tagging, cli=cli, registry=None, runner=runner, env=env)
            client.images.get(dependencies.read_text().strip()).tag(plan.dependency_tag)
    image = client.images.get(image_id)
    image.tag(plan.tag)
    image.tag(plan.alias)
    output = completed.stdout or ""
    layers = layer_outcomes(plan.layers, output, image.history(), held.layer_keys, stood_on=bool(plan.stands_on))
    origin: Origin = "dependencies" if plan.stands_on else how_built(output)
    seconds = time.monotonic() - started
    return Built(entry.name, plan.tag, image.attrs["Size"], seconds, origin, layers=layers, alias=plan.alias)
