"""What an untrusted run's image build may use: nothing worth stealing, and nothing the trusted
configuration did not already choose.

A build step can reach the runner's network (a cloud metadata endpoint, say), so an untrusted build takes its
bases, indexes and vendor settings from the trusted matrix.toml (the default branch's, TORCHYARD_TRUSTED_MATRIX),
gets no index credentials (user:password is dropped from every URL; a query, a fragment or a path segment that
reads as a token is refused), installs wheels only (`--no-build`) and
never pushes: what needs more waits for a trusted run. It uses the image a trusted run built from the same
inputs where there is one; else it builds its own under a tag of its own (WHEELS_ONLY is part of the content
tag), which no trusted run ever reuses.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from torchyard.errors import ImageBuildError
from torchyard.matrix.gate import NO_TRUSTED_CONFIG, TRUSTED_MATRIX_ENV, TrustedConfig, gate_entry, load_trusted
from torchyard.matrix.machine import Source
from torchyard.matrix.schema import Entry
from torchyard.trust import level_of


@dataclass(frozen=True)
class BuildPolicy:
    trusted: bool = True
    trusted_config: TrustedConfig = NO_TRUSTED_CONFIG

    @property
    def build_args(self) -> tuple[tuple[str, str], ...]:
        """WHEELS_ONLY for an untrusted build: part of the image's content tag, so an untrusted build never
        makes the image a trusted run would reuse."""
        return () if self.trusted else (("WHEELS_ONLY", "1"),)


TRUSTED = BuildPolicy()


def build_policy(env: Mapping[str, str], *, allowed_docker_run: Collection[str] = ()) -> BuildPolicy:
    """The policy of this run's builds; an untrusted one reads the trusted matrix.toml (its relative paths
    beside this checkout's matrix.toml, where the project is) with this machine's `allowed_docker_run`."""
    if level_of(env) == "trusted":
        return BuildPolicy()
    trusted_config = load_trusted(Path("matrix.toml"), allowed_docker_run, env)
    return BuildPolicy(trusted=False, trusted_config=trusted_config)


def check_untrusted_build(entry: Entry, policy: BuildPolicy) -> None:
    """An untrusted build of `entry` builds only from what the trusted configuration names (the trust gate's
    rule, held again here for every caller of the build)."""
    if policy.trusted:
        return
    if policy.trusted_config.plan is None:
        raise ImageBuildError(
            f"entry {entry.name!r}: an untrusted run builds its image only from the trusted matrix.toml's bases, "
            f"indexes and vendor settings: set {TRUSTED_MATRIX_ENV} to the default branch's (the workflow checks it "
            "out), or let a trusted run build the image first"
        )
    gate_entry(entry, "untrusted", policy.trusted_config)


def without_credentials(sources: Sequence[Source]) -> list[Source]:
    """The sources with any user:password dropped from their URLs."""
    stripped = []
    for source in sources:
        parts = urlsplit(source.location)
        if parts.username is None and parts.password is None:
            stripped.append(source)
            continue
        host = parts.hostname or ""
        netloc = f"{host}:{parts.port}" if parts.port else host
        stripped.append(Source(source.name, source.kind, urlunsplit(parts._replace(netloc=netloc))))
    return stripped


# A path segment that reads as a token rather than a name (`pypi.fury.io/<token>/team`, `.../t/<token>/simple`):
# long, one word of token characters with letters and digits both; or a token's published prefix (GitHub's,
# GitLab's, npm's, PyPI's macaroons), never a word such as a `pypi-proxy` repository.
TOKEN_SEGMENT = re.compile(
    r"(?=[A-Za-z0-9_.~]{16,}$)(?=.*[0-9])(?=.*[A-Za-z]).*"  # a 16-character entitlement key or longer
    r"|[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"  # a UUID key
    r"|.*%[0-9a-fA-F]{2}.*|.*;.*"  # an escaped or parametrized segment: a name needs neither
    r"|(?:gh[pousr]_|github_pat_|glpat-|npm_)[A-Za-z0-9_-]{16,}|pypi-AgE[A-Za-z0-9_-]+"
)


def secret_in_url(location: str) -> str:
    """Where a URL may carry a secret that dropping its credentials would not remove ("" where none): its query,
    its fragment or a path segment that reads as a token. Dropping those would change the index it names."""
    parts = urlsplit(location)
    if parts.scheme not in ("http", "https"):  # a folder or file:// index of this machine, served by torchyard
        return ""
    if parts.query:
        return "its query"
    if parts.fragment:
        return "its fragment"
    if any(TOKEN_SEGMENT.fullmatch(segment) for segment in parts.path.split("/")):
        return "a path segment that reads as a token"
    return ""


def check_no_secret(entry: Entry, sources: Sequence[Source]) -> None:
    """An untrusted build gets no index URL that may carry a secret anywhere in it: refused in one line that
    names the index and where, never the value."""
    for source in sources:
        where = secret_in_url(source.location)
        if where:
            parts = urlsplit(source.location)
            shown = f"{parts.scheme}://{parts.hostname or ''}/..."
            raise ImageBuildError(
                f"entry {entry.name!r}: index {source.name!r} ({shown}) may carry a secret in {where}, and an "
                "untrusted build gets no secret: give this machine a mirror of it that needs none "
                "(TORCHYARD_MIRRORS), or let a trusted run build the image"
            )


def build_sources(entry: Entry, policy: BuildPolicy, sources: Sequence[Source]) -> Sequence[Source]:
    """What a build of `entry` installs from: an untrusted build is checked against the trusted configuration
    first, and gets its sources without credentials, refused where one may hide elsewhere in a URL."""
    check_untrusted_build(entry, policy)
    if policy.trusted:
        return sources
    allowed = without_credentials(sources)
    check_no_secret(entry, allowed)
    return allowed
