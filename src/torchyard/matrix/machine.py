"""Per-machine settings, never in matrix.toml: mirrors for named indexes, local wheel folders for
installs, and base-image overrides.

Two sources, the environment winning over the file:
- `TORCHYARD_MIRRORS="pypi=file:///srv/pypi/simple nvidia=/srv/wheels"` (whitespace-separated), and
  `TORCHYARD_BASE_IMAGES="cpu=torchyard/base:bookworm"` (by entry name or accelerator);
- `$TORCHYARD_MACHINE_FILE`, else `$XDG_CONFIG_HOME/torchyard/machine.toml` (`~/.config/...`), with
  `[mirrors]` and `[base-images]` tables of the same `name = "value"` pairs;
- `TORCHYARD_REGISTRY` or `[registry] name`: the registry the runners share images and layers through.
A target with a scheme (`https://`, `http://`, `file://`) is a PEP 503 index; a plain path is a flat
folder of wheels (uv's `--find-links`). Mirrors change where files come from, never which files:
the lock's hashes still have to match.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from torchyard.errors import ConfigError
from torchyard.matrix.schema import Index

ENV_VAR = "TORCHYARD_MIRRORS"
FIND_LINKS_ENV = "TORCHYARD_FIND_LINKS"
BASES_ENV_VAR = "TORCHYARD_BASE_IMAGES"
FILE_ENV_VAR = "TORCHYARD_MACHINE_FILE"
REGISTRY_ENV = "TORCHYARD_REGISTRY"
TABLES = ("mirrors", "base-images", "limits", "allow", "registry")
# The distribution spec's pieces, lower case: a registry host[:port], and one path component.
_HOST = r"[a-z0-9]([a-z0-9.-]*[a-z0-9])?(:[0-9]{1,5})?"
_COMPONENT = r"[a-z0-9]+([._-][a-z0-9]+)*"
# host[:port][/path]; no scheme, no user, no tag.
REGISTRY_NAME = re.compile(rf"{_HOST}(/{_COMPONENT})*")
# An image reference as Docker takes it: [registry[:port]/]path[:tag][@sha256:digest].
IMAGE_REFERENCE = re.compile(
    rf"({_HOST}/)?{_COMPONENT}(/{_COMPONENT})*(:[A-Za-z0-9_][A-Za-z0-9_.-]{{0,127}})?(@sha256:[0-9a-f]{{64}})?"
)
MEMORY = re.compile(r"[1-9][0-9]*[bkmg]?")
DEFAULT_PIDS = 4096


@dataclass(frozen=True)
class Source:
    """Where one named index is read from on this machine."""

    name: str
    kind: Literal["index", "find-links"]
    location: str


def _target(name: str, target: str, origin: str) -> Source:
    if re.match(r"(https?|file)://", target):
        return Source(name, "index", target.rstrip("/"))
    if not target.startswith("/"):
        raise ConfigError(f"{origin}: mirror {name!r}: expected a URL or an absolute folder path, got {target!r}")
    return Source(name, "find-links", target)


def _machine_data(path: Path) -> dict[str, object]:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError, RecursionError) as error:
        reason = "nested too deeply" if isinstance(error, RecursionError) else str(error)
        raise ConfigError(f"{path}: cannot read: {reason}") from None
    unknown = sorted(set(data) - set(TABLES))
    if unknown:
        raise ConfigError(f"{path}: {unknown[0]}: unknown key; expected only {', '.join(f'[{t}]' for t in TABLES)}")
    return data


def _from_file(path: Path, table_name: str) -> dict[str, str]:
    table = _machine_data(path).get(table_name, {})
    if not isinstance(table, dict) or not all(isinstance(value, str) for value in table.values()):
        raise ConfigError(f'{path}: {table_name}: expected a table of name = "value" strings')
    return dict(table)


SIZE_UNITS = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
DURATION = re.compile(r"([1-9][0-9]*)([smh])")
DURATION_UNITS = {"s": 1, "m": 60, "h": 3600}


def size_bytes(size: str) -> int:
    """`16g` as bytes (docker's units: b, k, m, g; none is bytes)."""
    unit = size[-1] if size[-1] in SIZE_UNITS else ""
    return int(size[: len(size) - len(unit)]) * SIZE_UNITS[unit]


def duration_seconds(duration: str) -> int:
    match = DURATION.fullmatch(duration)
    if match is None:
        raise ValueError(duration)
    return int(match[1]) * DURATION_UNITS[match[2]]


@dataclass(frozen=True)
class Limits:
    """What a test container may use on this machine: `[limits]` in machine.toml. matrix.toml may lower
    any of them for its entries, never raise one."""

    memory: str | None = None  # docker's --memory ("16g"); None: MEMORY_SHARE of the engine's memory
    pids: int = DEFAULT_PIDS
    tmp: str = "4g"  # the size of the container's private /tmp (a tmpfs: it counts as the container's memory)
    home: str = "1g"  # the size of its private home folder (a tmpfs too)
    reports: str = "512m"  # the most a run may hand back in its reports folder (counted while it writes)
    cache: str = "32g"  # the most an untrusted run's own cache volume may hold while it runs
    timeout: str = "6h"  # the longest an entry's `timeout` may be


MEMORY_SHARE = 0.75
LIMIT_KEYS = ("memory", "pids", "tmp", "home", "reports", "cache", "timeout")


def _size(path: Path, key: str, value: object) -> str:
    if not isinstance(value, str) or not MEMORY.fullmatch(value):
        raise ConfigError(f'{path}: limits > {key}: expected a size such as "16g", got {value!r}')
    return value


def load_limits(env: Mapping[str, str] = os.environ) -> Limits:
    path = machine_file(env)
    table = _machine_data(path).get("limits", {})
    if not isinstance(table, dict) or set(table) - set(LIMIT_KEYS):
        raise ConfigError(f"{path}: limits: expected only {', '.join(LIMIT_KEYS)}")
    defaults = Limits()
    memory, pids = table.get("memory"), table.get("pids", DEFAULT_PIDS)
    if memory is not None:
        _size(path, "memory", memory)
    if isinstance(pids, bool) or not isinstance(pids, int) or pids < 64:
        raise ConfigError(f"{path}: limits > pids: expected a whole number of at least 64, got {pids!r}")
    timeout = table.get("timeout", defaults.timeout)
    if not isinstance(timeout, str) or not DURATION.fullmatch(timeout):
        raise ConfigError(
            f'{path}: limits > timeout: expected a duration such as "6h", "90m" or "600s", got {timeout!r}'
        )
    return Limits(
        memory,
        pids,
        tmp=_size(path, "tmp", table.get("tmp", defaults.tmp)),
        home=_size(path, "home", table.get("home", defaults.home)),
        reports=_size(path, "reports", table.get("reports", defaults.reports)),
        cache=_size(path, "cache", table.get("cache", defaults.cache)),
        timeout=timeout,
    )


def _allow_table(env: Mapping[str, str]) -> tuple[Path, dict[str, object]]:
    path = machine_file(env)
    table = _machine_data(path).get("allow", {})
    if not isinstance(table, dict) or set(table) - {"docker-run", "network"}:
        raise ConfigError(f'{path}: allow: expected docker-run = ["--flag", ...] and network = true only')
    return path, table


def allowed_docker_run(env: Mapping[str, str] = os.environ) -> frozenset[str]:
    """`docker run` flags this machine allows matrix.toml to use although they give up isolation."""
    path, table = _allow_table(env)
    flags = table.get("docker-run", [])
    if not isinstance(flags, list):
        raise ConfigError(f'{path}: allow: expected docker-run = ["--flag", ...] and network = true only')
    if not all(isinstance(flag, str) and flag.startswith("-") for flag in flags):
        raise ConfigError(f'{path}: allow > docker-run: expected flags such as "--privileged"')
    return frozenset(flags)


def allows_network(env: Mapping[str, str] = os.environ) -> bool:
    """Whether this machine lets an entry's tests have a network (`[allow] network = true`); matrix.toml's
    `network` key alone never does, and an untrusted run never gets one."""
    path, table = _allow_table(env)
    allowed = table.get("network", False)
    if not isinstance(allowed, bool):
        raise ConfigError(f"{path}: allow > network: expected true or false, got {allowed!r}")
    return allowed


def load_registry_name(env: Mapping[str, str] = os.environ) -> str | None:
    """The registry this machine's runners share (`TORCHYARD_REGISTRY`, else `[registry] name`), or None."""
    path = machine_file(env)
    if env.get(REGISTRY_ENV):
        name, origin = env[REGISTRY_ENV], REGISTRY_ENV
    else:
        table = _machine_data(path).get("registry", {})
        if not isinstance(table, dict) or set(table) - {"name"} or not isinstance(table.get("name", ""), str):
            raise ConfigError(f'{path}: registry: expected name = "host[:port]/path" only')
        if "name" not in table:
            return None
        name, origin = table["name"], f"{path}: registry > name"
    if not REGISTRY_NAME.fullmatch(name):
        shown = "a value with credentials (not shown)" if "@" in name else repr(name)
        raise ConfigError(
            f"{origin}: expected host[:port]/path such as ghcr.io/my-org or 127.0.0.1:5000/team, got {shown} "
            "(no scheme and no credentials: those come from `docker login` or TORCHYARD_REGISTRY_USERNAME and "
            "TORCHYARD_REGISTRY_PASSWORD)"
        )
    return name


def machine_file(env: Mapping[str, str]) -> Path:
    if FILE_ENV_VAR in env:
        return Path(env[FILE_ENV_VAR])
    config_home = Path(env.get("XDG_CONFIG_HOME") or Path(env.get("HOME", "/nonexistent")) / ".config")
    return config_home / "torchyard" / "machine.toml"


def _pairs(env: Mapping[str, str], variable: str, what: str) -> dict[str, str]:
    pairs = {}
    for pair in env.get(variable, "").split():
        name, separator, value = pair.partition("=")
        if not separator or not name or not value:
            raise ConfigError(f"{variable}: expected NAME={what} pairs, got {pair!r}")
        pairs[name] = value
    return pairs


def load_mirrors(env: Mapping[str, str] = os.environ) -> dict[str, Source]:
    """The machine's mirrors by index name (empty when none is configured)."""
    path = machine_file(env)
    mirrors = {name: _target(name, target, str(path)) for name, target in _from_file(path, "mirrors").items()}
    for name, target in _pairs(env, ENV_VAR, "URL-or-folder").items():
        mirrors[name] = _target(name, target, ENV_VAR)
    return mirrors


def load_base_overrides(env: Mapping[str, str] = os.environ) -> dict[str, str]:
    """Base images that replace matrix.toml's on this machine, by entry name or accelerator name."""
    path = machine_file(env)
    from_file, from_env = _from_file(path, "base-images"), _pairs(env, BASES_ENV_VAR, "IMAGE")
    sources = ((f"{path}: base-images", from_file, ""), (BASES_ENV_VAR, from_env, " (pairs are separated by spaces)"))
    for where, pairs, hint in sources:
        for name, image in pairs.items():
            if not IMAGE_REFERENCE.fullmatch(image):
                raise ConfigError(f"{where}: {name}: not an image reference: {image!r}{hint}")
    return {**from_file, **from_env}


def sources_for(indexes: Sequence[Index], mirrors: Mapping[str, Source]) -> tuple[Source, ...]:
    """Each index as this machine reaches it: its mirror when one is set, else its matrix URL."""
    return tuple(mirrors.get(index.name, Source(index.name, "index", index.url)) for index in indexes)


def index_args(sources: Sequence[Source], extra_find_links: Sequence[str] = ()) -> list[str]:
    """uv's index arguments: the first index is the default, the rest are extra; folders are find-links."""
    indexes = [source.location for source in sources if source.kind == "index"]
    args = ["--default-index", indexes[0]] if indexes else ["--no-index"]
    for url in indexes[1:]:
        args += ["--index", url]
    for folder in [*(source.location for source in sources if source.kind == "find-links"), *extra_find_links]:
        args += ["--find-links", folder]
    return args


def extra_find_links(env: Mapping[str, str] = os.environ) -> tuple[str, ...]:
    """Local wheel folders to try before any index (`TORCHYARD_FIND_LINKS`, whitespace-separated).

    Only for installs: the lock's hashes decide which files are acceptable, so a folder can only save a
    download, never change what is installed.
    """
    return tuple(folder for folder in env.get(FIND_LINKS_ENV, "").split() if Path(folder).is_dir())
