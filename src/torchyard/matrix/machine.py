"""Per-machine settings, never in matrix.toml: mirrors for named indexes, local wheel folders for
installs, base-image overrides, the shared registry, the limits of a test container and what the machine
allows. `load_machine` reads them all once, at the CLI's edge, into a frozen `Machine` that is passed in
(a bad value is one line before any command does work); nothing downstream reads them again.

The environment (`TORCHYARD_MIRRORS`, `TORCHYARD_BASE_IMAGES`, `TORCHYARD_REGISTRY`, ...) wins over the file
(`$TORCHYARD_MACHINE_FILE`, else `$XDG_CONFIG_HOME/torchyard/machine.toml`); docs/reference/machine.md lists
every key. Mirrors change where files come from, never which files: the lock's hashes still have to match.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from torchyard.errors import ConfigError
from torchyard.matrix.schema import Index

ENV_VAR = "TORCHYARD_MIRRORS"
FIND_LINKS_ENV = "TORCHYARD_FIND_LINKS"
BASES_ENV_VAR = "TORCHYARD_BASE_IMAGES"
FILE_ENV_VAR = "TORCHYARD_MACHINE_FILE"
REGISTRY_ENV = "TORCHYARD_REGISTRY"
USERNAME_ENV = "TORCHYARD_REGISTRY_USERNAME"
PASSWORD_ENV = "TORCHYARD_REGISTRY_PASSWORD"
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


def _from_file(path: Path, data: Mapping[str, object], table_name: str) -> dict[str, str]:
    table = data.get(table_name, {})
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


def _limits(path: Path, data: Mapping[str, object]) -> Limits:
    table = data.get("limits", {})
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


def _allow(path: Path, data: Mapping[str, object]) -> tuple[frozenset[str], bool]:
    """`[allow]`: the `docker run` flags matrix.toml may use although they give up isolation, and whether
    an entry's tests may have a network."""
    table = data.get("allow", {})
    if not isinstance(table, dict) or set(table) - {"docker-run", "network"}:
        raise ConfigError(f'{path}: allow: expected docker-run = ["--flag", ...] and network = true only')
    flags = table.get("docker-run", [])
    if not isinstance(flags, list):
        raise ConfigError(f'{path}: allow: expected docker-run = ["--flag", ...] and network = true only')
    if not all(isinstance(flag, str) and flag.startswith("-") for flag in flags):
        raise ConfigError(f'{path}: allow > docker-run: expected flags such as "--privileged"')
    network = table.get("network", False)
    if not isinstance(network, bool):
        raise ConfigError(f"{path}: allow > network: expected true or false, got {network!r}")
    return frozenset(flags), network


@dataclass(frozen=True)
class Registry:
    """Where this machine's runners share images: `host[:port][/path]`, and how to log in to it."""

    name: str
    auth: dict[str, str] | None = field(default=None, repr=False)  # from the environment; None: Docker's own store

    @property
    def host(self) -> str:
        return self.name.split("/", 1)[0]

    def ref(self, local: str) -> str:
        """The registry's name for a local `torchyard/<project>/<entry>:<tag>`."""
        return f"{self.name}/{local}"


def _registry_name(path: Path, data: Mapping[str, object], env: Mapping[str, str]) -> str | None:
    """The registry this machine's runners share (`TORCHYARD_REGISTRY`, else `[registry] name`), or None."""
    if env.get(REGISTRY_ENV):
        name, origin = env[REGISTRY_ENV], REGISTRY_ENV
    else:
        table = data.get("registry", {})
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


def _registry(path: Path, data: Mapping[str, object], env: Mapping[str, str]) -> Registry | None:
    """The machine's registry with its credentials from the environment, or None when none is set."""
    name = _registry_name(path, data, env)
    if name is None:
        return None
    username, password = env.get(USERNAME_ENV, ""), env.get(PASSWORD_ENV, "")
    if bool(username) != bool(password):
        missing = PASSWORD_ENV if username else USERNAME_ENV
        raise ConfigError(f"{missing} is not set: registry credentials from the environment need both variables")
    return Registry(name, {"username": username, "password": password} if username else None)


def machine_file(env: Mapping[str, str]) -> Path:
    if FILE_ENV_VAR in env:
        return Path(env[FILE_ENV_VAR])
    config_home = Path(env.get("XDG_CONFIG_HOME") or Path(env.get("HOME", "/nonexistent")) / ".config")
    return config_home / "torchyard" / "machine.toml"


def _pairs(text: str, variable: str, what: str) -> dict[str, str]:
    pairs = {}
    for pair in text.split():
        name, separator, value = pair.partition("=")
        if not separator or not name or not value:
            raise ConfigError(f"{variable}: expected NAME={what} pairs, got {pair!r}")
        pairs[name] = value
    return pairs


def _mirrors(path: Path, data: Mapping[str, object], variable: str) -> dict[str, Source]:
    """The machine's mirrors by index name (empty when none is configured); `variable` is `TORCHYARD_MIRRORS`."""
    from_file = _from_file(path, data, "mirrors")
    mirrors = {name: _target(name, target, str(path)) for name, target in from_file.items()}
    for name, target in _pairs(variable, ENV_VAR, "URL-or-folder").items():
        mirrors[name] = _target(name, target, ENV_VAR)
    return mirrors


def _base_overrides(path: Path, data: Mapping[str, object], variable: str) -> dict[str, str]:
    """Base images that replace matrix.toml's on this machine, by entry name or accelerator name; `variable`
    is `TORCHYARD_BASE_IMAGES`."""
    from_file = _from_file(path, data, "base-images")
    from_env = _pairs(variable, BASES_ENV_VAR, "IMAGE")
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
    """uv's index arguments, in matrix.toml's order of priority; folders are find-links. uv asks its `--index`
    flags in order and its `--default-index` last, so the last index is the default."""
    indexes = [source.location for source in sources if source.kind == "index"]
    args: list[str] = []
    for url in indexes[:-1]:
        args += ["--index", url]
    args += ["--default-index", indexes[-1]] if indexes else ["--no-index"]
    for folder in [*(source.location for source in sources if source.kind == "find-links"), *extra_find_links]:
        args += ["--find-links", folder]
    return args


def write_index_args(path: Path, sources: Sequence[Source]) -> Path:
    """`index_args` as a file that bash's `read -ra` takes (it wants the newline), readable by a container's
    user: how a build step gets them, as a secret or a read-only mount, since URLs may carry credentials."""
    path.write_text(" ".join(index_args(sources)) + "\n")
    path.chmod(0o644)
    return path


def _find_links(text: str) -> tuple[str, ...]:
    """Local wheel folders to try before any index (`TORCHYARD_FIND_LINKS`, whitespace-separated; those that
    are folders on this machine).

    Only for installs: the lock's hashes decide which files are acceptable, so a folder can only save a
    download, never change what is installed.
    """
    return tuple(folder for folder in text.split() if Path(folder).is_dir())


@dataclass(frozen=True)
class Machine:
    """This machine's settings, read once by `load_machine` and passed in. `Machine()` is a machine that
    sets nothing: what `load_machine` gives where no file and no variable says otherwise."""

    limits: Limits = Limits()
    allowed_docker_run: frozenset[str] = frozenset()  # flags matrix.toml may use although they give up isolation
    allows_network: bool = False  # matrix.toml's `network` alone never gives one; an untrusted run never gets one
    registry: Registry | None = None
    mirrors: Mapping[str, Source] = field(default_factory=dict)
    base_overrides: Mapping[str, str] = field(default_factory=dict)  # by entry name or accelerator name
    find_links: tuple[str, ...] = ()  # local wheel folders, for installs only

    def sources(self, indexes: Sequence[Index]) -> tuple[Source, ...]:
        """Each index as this machine reaches it (`sources_for` with the machine's mirrors)."""
        return sources_for(indexes, self.mirrors)

    def install_sources(self, indexes: Sequence[Index]) -> tuple[Source, ...]:
        """What an image's installs read: each index as this machine reaches it, then its local wheel folders."""
        return (*self.sources(indexes), *(Source("local", "find-links", folder) for folder in self.find_links))


def load_machine(env: Mapping[str, str]) -> Machine:
    """Every setting of this machine from `env` and its machine file, read once; a bad value is one line
    naming the file or variable, and the tables are checked in `TABLES` order."""
    path = machine_file(env)
    data = _machine_data(path)
    mirrors = _mirrors(path, data, env.get(ENV_VAR, ""))
    base_overrides = _base_overrides(path, data, env.get(BASES_ENV_VAR, ""))
    limits = _limits(path, data)
    allowed_docker_run, allows_network = _allow(path, data)
    return Machine(
        limits=limits,
        allowed_docker_run=allowed_docker_run,
        allows_network=allows_network,
        registry=_registry(path, data, env),
        mirrors=mirrors,
        base_overrides=base_overrides,
        find_links=_find_links(env.get(FIND_LINKS_ENV, "")),
    )
