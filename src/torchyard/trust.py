"""Whether a run is trusted: what it may read and write of the caches, and what it may build.

`--trust` wins, then `TORCHYARD_TRUST`, then GitHub Actions' event: a pull request (of any kind, from a fork
or not) is untrusted, and so is a push, schedule or dispatch anywhere but the default branch; a push,
schedule or dispatch on the default branch is trusted. Outside Actions a person's own run is trusted.
Every cache a run reads back lives in a scope named by the project and the trust (see `cache_scope`).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, get_args

from torchyard import contract
from torchyard.errors import UsageError
from torchyard.util.git import find_checkout

Trust = Literal["trusted", "untrusted"]
TRUST_LEVELS: tuple[Trust, ...] = get_args(Trust)
TRUST_ENV = contract.TRUST
TRUSTED_EVENTS = frozenset({"push", "schedule", "workflow_dispatch", "merge_group"})
# The readable part of a project's name at most (Docker allows 255 characters in a whole image name).
READABLE_LENGTH = 32


@dataclass(frozen=True)
class RunTrust:
    level: Trust
    why: str  # for the run's header: where the level came from

    @property
    def trusted(self) -> bool:
        return self.level == "trusted"


def _parse(value: str, origin: str) -> Trust:
    if value not in TRUST_LEVELS:
        raise UsageError(f"{origin}: expected trusted or untrusted, got {value!r}")
    return value


def _event(env: Mapping[str, str]) -> Mapping[str, object]:
    path = env.get("GITHUB_EVENT_PATH")
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8")) if path else {}
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _default_branch(event: Mapping[str, object]) -> str | None:
    repository = event.get("repository")
    branch = repository.get("default_branch") if isinstance(repository, dict) else None
    return branch if isinstance(branch, str) else None


def resolve_trust(flag: str | None, env: Mapping[str, str]) -> RunTrust:
    """The run's trust, and why (the flag, the variable, or the Actions event)."""
    if flag:
        return RunTrust(_parse(flag, "--trust"), "--trust")
    if env.get(TRUST_ENV):
        return RunTrust(_parse(env[TRUST_ENV], TRUST_ENV), TRUST_ENV)
    if env.get("GITHUB_ACTIONS") != "true":
        return RunTrust("trusted", "outside GitHub Actions")
    name = env.get("GITHUB_EVENT_NAME", "")
    if name not in TRUSTED_EVENTS:
        return RunTrust("untrusted", f"the {name or 'unknown'} event")
    ref = env.get("GITHUB_REF_NAME", "")
    default = _default_branch(_event(env))
    if default is not None and ref == default and env.get("GITHUB_REF_TYPE", "branch") == "branch":
        return RunTrust("trusted", f"{name} on the default branch {default}")
    return RunTrust("untrusted", f"{name} on {ref or 'an unknown ref'}, not the default branch {default or '?'}")


def level_of(env: Mapping[str, str]) -> Trust:
    """The level `torchyard test` or `build` resolved and put in the run's environment (`resolve_trust`, a
    person's own run included); untrusted where none was set or it says anything else: fails closed."""
    return "trusted" if env.get(TRUST_ENV) == "trusted" else "untrusted"


def project_scope(matrix: Path, env: Mapping[str, str]) -> str:
    """The project's name on this runner, in its images' names and its caches' volumes: its GitHub repository
    where Actions says it, else its matrix's folder, as `<last part>-<12 hex of the whole>` (`nanogpt-0123abcd4567`).
    The hash keeps two projects apart; the readable part is for whoever lists the runner's images. Neither
    comes from the checkout's content, so a pull request cannot name another project's images or caches."""
    identity = env.get("GITHUB_REPOSITORY") or str(matrix.resolve().parent)
    readable = re.sub(r"[^a-z0-9]+", "-", identity.rstrip("/").rpartition("/")[2].lower())
    readable = readable[:READABLE_LENGTH].strip("-") or "project"
    return f"{readable}-{hashlib.sha256(identity.encode()).hexdigest()[:12]}"


MATRIX = "matrix.toml"


def matrix_tag(matrix: Path) -> str:
    """What sets a matrix file's entries apart from another's of the same project, in their caches' and
    baselines' names: "" for a checkout's own `matrix.toml` at its top (and for one outside any checkout, whose
    project is its folder already); else `-m` and 8 hex of its path within its checkout (or of its name), so
    examples/zoo/matrix.toml's `cpu` and the root's `cpu` share neither a trusted cache nor a kept baseline.
    Read from the path alone, never from the files: a pull request moves no run into another's scope."""
    checkout = find_checkout(matrix.parent)
    absolute = Path(os.path.abspath(matrix))  # noqa: PTH100 (lexical, as find_checkout is)
    within = absolute.relative_to(checkout.top).as_posix() if checkout is not None else absolute.name
    return "" if within == MATRIX else f"-m{hashlib.sha256(within.encode()).hexdigest()[:8]}"
