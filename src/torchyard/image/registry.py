"""Images in an OCI registry that many runners share: names, credentials, pull, push and digests.

The registry is a machine setting (`TORCHYARD_REGISTRY`, else `[registry] name` in machine.toml), never
matrix.toml: a pull request that edits the matrix must not redirect where a runner pushes. Its credentials
come from Docker's own store (`docker login`, credential helpers) or `TORCHYARD_REGISTRY_USERNAME` /
`TORCHYARD_REGISTRY_PASSWORD`, and go to the engine in the API's auth header and to the build client through
a private, temporary Docker config: never into an argument list, a label, a layer or a log line. Transfers go
through the Docker SDK, so the engine's own mirrors, TLS settings and credential helpers apply.
"""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import docker
import docker.errors

from torchyard.errors import ImageBuildError, TorchyardError
from torchyard.image.outcome import Built, Transfer
from torchyard.image.plan import BuildPlan
from torchyard.image.policy import TRUSTED, BuildPolicy
from torchyard.matrix.machine import Registry
from torchyard.matrix.schema import Entry
from torchyard.util.proc import redact

DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
MISSING = re.compile(r"manifest unknown|not found|does not exist|name unknown", re.IGNORECASE)
NO_REGISTRY = "--push needs a registry: set TORCHYARD_REGISTRY (host[:port]/path) or [registry] name in machine.toml"


def registry_host(reference: str) -> str:
    """The registry host of an image reference (Docker Hub when the first part is not a host)."""
    first, slash, _ = reference.partition("/")
    if slash and ("." in first or ":" in first or first == "localhost"):
        return first
    return "docker.io"


def _follow(events: Iterator[dict[str, Any]], reference: str, verb: str, env: Mapping[str, str]) -> Transfer:
    """Show the engine's stream as one line per finished layer; an error event raises, redacted."""
    sizes: dict[str, int] = {}
    done = 0
    for event in events:
        if "error" in event:
            detail = redact(str(event.get("error", "")), env)
            if MISSING.search(detail):
                raise LookupError(detail)
            raise TorchyardError(f"{verb} {reference} failed: {detail}")
        layer, status = str(event.get("id", "")), str(event.get("status", ""))
        total = (event.get("progressDetail") or {}).get("total")
        if layer and isinstance(total, int) and status in {"Downloading", "Pushing"}:
            sizes[layer] = max(sizes.get(layer, 0), total)
        if layer and status in {"Pull complete", "Pushed", "Already exists", "Layer already exists"}:
            done += 1
            print(f"  {verb} {reference}: layer {layer} {status.lower()}", file=sys.stderr, flush=True)
    return Transfer(reference, done, sum(sizes.values()))


def pull(client: docker.DockerClient, registry: Registry, reference: str, env: Mapping[str, str]) -> Transfer | None:
    """Pull `reference`; None when the registry does not have it. A registry that cannot be read (down,
    or no credentials, as in a fork's pull request) is a miss too, said in one line: the image is then
    built, which gives the same content."""
    repository, _, tag = reference.rpartition(":")
    print(f"pulling {reference}", file=sys.stderr, flush=True)
    try:
        events = client.api.pull(repository, tag, stream=True, decode=True, auth_config=registry.auth)
        return _follow(events, reference, "pull", env)
    except (LookupError, docker.errors.NotFound):
        return None
    except (docker.errors.APIError, TorchyardError) as error:
        detail = redact(str(getattr(error, "explanation", None) or error), env)
        if not MISSING.search(detail):
            print(f"torchyard: cannot pull {reference} ({detail}); building it instead", file=sys.stderr)
        return None


# The labels a pulled image must carry as its plan's build arguments say (label, build argument).
PLAN_LABELS = (
    ("dev.torchyard.entry", "TORCHYARD_ENTRY"),
    ("dev.torchyard.scope", "PROJECT_SCOPE"),
    ("dev.torchyard.lock-digest", "LOCK_DIGEST"),
    ("dev.torchyard.layers", "LAYER_KEYS"),
    ("org.opencontainers.image.base.digest", "BASE_DIGEST"),
    ("dev.torchyard.content", "CONTENT_DIGEST"),
    ("dev.torchyard.wheels-only", "WHEELS_ONLY"),
)


def plan_mismatch(labels: Mapping[str, str] | None, plan: BuildPlan) -> str:
    """The first label of a pulled image that its plan does not say ("" where all agree): the registry may hold
    what anyone who could push there put under the plan's tag."""
    args = dict(plan.build_args)
    for label, arg in PLAN_LABELS:
        if (labels or {}).get(label, "") != args.get(arg, ""):
            return label
    return ""


def pull_image(
    entry: Entry,
    plans: Sequence[BuildPlan],
    client: docker.DockerClient,
    registry: Registry | None,
    env: Mapping[str, str],
    *,
    policy: BuildPolicy = TRUSTED,
) -> Built | None:
    """The first of `plans`' images the registry has, pulled by its content-addressed tag and tagged as
    `find_local` tags one found (an untrusted run moves no alias); None when none is there."""
    if registry is None:
        return None
    for plan in plans:
        started = time.monotonic()
        pulled = pull(client, registry, registry.ref(plan.tag), env)
        if pulled is None:
            continue
        image = client.images.get(registry.ref(plan.tag))
        mismatch = plan_mismatch(image.labels, plan)
        if mismatch:
            client.images.remove(registry.ref(plan.tag), force=True)
            raise ImageBuildError(
                f"entry {entry.name!r}: the registry's {registry.ref(plan.tag)} is not what its plan builds (its "
                f"{mismatch} label differs): it was removed here, unused; check who can push to {registry.host}"
            )
        image.tag(plan.tag)
        if policy.trusted:
            image.tag(plan.alias)
        seconds = time.monotonic() - started
        return Built(entry.name, plan.tag, image.attrs["Size"], seconds, "pulled", pulled=pulled, alias=plan.alias)
    return None


def push(client: docker.DockerClient, registry: Registry, reference: str, env: Mapping[str, str]) -> Transfer:
    """Push a local `reference` (already tagged with the registry's name)."""
    repository, _, tag = reference.rpartition(":")
    print(f"pushing {reference}", file=sys.stderr, flush=True)
    try:
        events = client.api.push(repository, tag, stream=True, decode=True, auth_config=registry.auth)
        return _follow(events, reference, "push", env)
    except (LookupError, docker.errors.APIError) as error:
        raise ImageBuildError(f"cannot push {reference} to {registry.host}: {redact(str(error), env)}") from None


def publish(
    client: docker.DockerClient, registry: Registry | None, tags: Sequence[str], env: Mapping[str, str]
) -> tuple[Transfer, ...]:
    """Push local `tags` (an image's content-addressed tag and its entry's alias) to the machine's registry."""
    if registry is None:
        raise ImageBuildError(NO_REGISTRY)
    transfers = []
    for local in tags:
        repository, _, tag = registry.ref(local).rpartition(":")
        client.images.get(local).tag(repository, tag)
        transfers.append(push(client, registry, registry.ref(local), env))
    return tuple(transfers)


def remote_digest(client: docker.DockerClient, reference: str, auth: dict[str, str] | None = None) -> str:
    """The digest the registry serves for `reference` now: the multi-platform index's own digest where
    there is one (never one platform's manifest), as the engine reads it from the registry API."""
    try:
        data = client.images.get_registry_data(reference, auth_config=auth)
    except docker.errors.NotFound:
        raise TorchyardError(f"{reference}: not in its registry (manifest unknown)") from None
    except docker.errors.APIError as error:
        raise TorchyardError(f"{reference}: the registry did not answer: {redact(str(error.explanation))}") from None
    digest = str(data.attrs.get("Descriptor", {}).get("digest", ""))
    if not DIGEST.fullmatch(digest):
        raise TorchyardError(f"{reference}: the registry answered {digest!r}, not a sha256 digest")
    return digest
