"""Checks of matrix.toml values (not only their types), each failing with the reader's one pointed line.

Requirements must be PEP 508, vendor versions PEP 440, Pythons ones torch supports, tolerance keys a known
dtype and backend with bounds that can hold, and `docker-run` flags only those that keep the container
sealed: anything that gives up isolation needs this machine's own allow-list (machine.toml, never
matrix.toml), because a pull request can edit matrix.toml and self-hosted runners run it.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Collection, Iterator
from pathlib import Path, PurePosixPath

from packaging.requirements import InvalidRequirement, Requirement
from packaging.version import InvalidVersion, Version

from torchyard.matrix.reader import Table, describe
from torchyard.names import BACKEND_NAMES, COMPILE_MODES, PRECISION_DTYPES, TRAIN_BACKENDS
from torchyard.util.checkout import linked_component

SUPPORTED_PYTHONS = ("3.10", "3.11", "3.12", "3.13", "3.14")
# `docker run` flags that cannot widen what a test container reaches (resources, environment, labels); their
# values are checked too (an environment variable needs its value, a resource limit may only be lowered: see
# torchyard.seal). `--tmpfs`, `--ulimit` and `--cpu-shares` can raise what the machine gives a run.
SAFE_DOCKER_RUN = frozenset(
    {
        "--shm-size", "--memory", "--memory-swap", "--memory-reservation", "--cpus", "--cpuset-cpus",
        "--env", "-e", "--label", "-l", "--stop-timeout", "--pids-limit", "--oom-score-adj",
    }
)  # fmt: skip
# `docker run` flags that would undo the warden (PID 1, root with four capabilities, which starts the tests
# as the run's user): the user, the entry point, and a health check (run as the container's user: root's).
WARDENS_DOCKER_RUN = frozenset(
    {
        "--user", "-u", "--entrypoint", "--health-cmd", "--health-interval", "--health-retries",
        "--health-start-period", "--health-start-interval", "--health-timeout",
    }
)  # fmt: skip
# The prefix of the variables torchyard sets in its containers (the run's trust among them).
OWN_VARIABLES = "TORCHYARD_"
# What a device runtime reads to decide which GPUs a container gets (NVIDIA's container toolkit, AMD's):
# set in a container's environment they hand it devices no `--gpus` or `--device` asked for.
RUNTIME_VARIABLES = ("NVIDIA_", "AMD_VISIBLE_DEVICES")
# What the dynamic loader and the C library read in every process the container starts, its first (the image's
# warden, which holds the deadline) included, before any of its own code runs: glibc's list of variables a
# setuid program drops (UNSECURE_ENVVARS), and every LD_ one.
LOADER_VARIABLES = (
    "LD_", "GCONV_PATH", "GETCONF_DIR", "GLIBC_TUNABLES", "HOSTALIASES", "LOCALDOMAIN", "LOCPATH", "MALLOC_",
    "NIS_PATH", "NLSPATH", "RESOLV_HOST_CONF", "RES_OPTIONS", "TMPDIR", "TZDIR",
)  # fmt: skip
TOLERANCE_BACKENDS = (
    *BACKEND_NAMES,
    *(f"inductor:{mode}" for mode in COMPILE_MODES if mode != "default"),
    *TRAIN_BACKENDS,
    "*",
)


def requirement(table: Table, key: str, value: str) -> None:
    try:
        Requirement(value)
    except InvalidRequirement as error:
        raise table.error(key, f"not a PEP 508 requirement: {describe(value)} ({str(error).splitlines()[0]})") from None


def vendor_version(table: Table, key: str, value: str) -> None:
    if value == "*":
        return
    try:
        Version(value)
    except InvalidVersion:
        raise table.error(key, f'expected a PEP 440 version or "*", got {describe(value)}') from None


def python(table: Table, key: str, value: str) -> None:
    if value not in SUPPORTED_PYTHONS:
        raise table.error(key, f"Python {value} is not one torchyard supports ({', '.join(SUPPORTED_PYTHONS)})")


def _suggest(value: str, known: Collection[str]) -> str:
    close = difflib.get_close_matches(value, list(known), n=1)
    return f"; did you mean {close[0]!r}?" if close else f" (one of {', '.join(known)})"


def tolerance_key(table: Table, key: str) -> None:
    dtype, _, backend = key.partition(".")
    dtypes = tuple(PRECISION_DTYPES.values())
    if dtype not in dtypes:
        raise table.error(key, f"unknown dtype {describe(dtype)}{_suggest(dtype, dtypes)}")
    if backend not in TOLERANCE_BACKENDS:
        raise table.error(key, f"unknown backend {describe(backend)}{_suggest(backend, TOLERANCE_BACKENDS)}")


def bound(table: Table, key: str, value: float | None) -> None:
    if value is None:
        return
    if not math.isfinite(value):
        raise table.error(key, f"expected a finite number, got {value}")
    if key == "min-cosine" and not -1.0 <= value <= 1.0:
        raise table.error(key, f"a cosine lies in [-1, 1], got {value}")
    if key != "min-cosine" and value < 0:
        raise table.error(
            key, f"{'a factor' if key == 'noise-factor' else 'an error bound'} cannot be negative, got {value}"
        )


# docker run's flags that take no value: a word after one of them is not its value.
BOOLEAN_DOCKER_RUN = frozenset(
    {
        "--privileged", "--init", "--read-only", "--rm", "--tty", "-t", "--interactive", "-i", "--detach", "-d",
        "--oom-kill-disable", "--no-healthcheck", "--publish-all", "-P", "--sig-proxy", "--disable-content-trust",
    }
)  # fmt: skip


def _tokens(flags: tuple[str, ...]) -> Iterator[tuple[int, str, str, bool]]:
    """(position, flag, value, is_flag) read as docker's parser (spf13/pflag) reads them: a flag that takes a
    value and has no `=` takes the next item as its value whatever it is, `--cpus` or `-x` included; a word no
    flag took is a stray one (docker would run it as the image)."""
    position = 0
    while position < len(flags):
        item = flags[position]
        if not item.startswith("-"):
            yield position, item, "", False
            position += 1
            continue
        flag, separator, value = item.partition("=")
        if not separator and flag not in BOOLEAN_DOCKER_RUN:
            value = flags[position + 1] if position + 1 < len(flags) else ""
            yield position, flag, value, True
            position += 2
            continue
        yield position, flag, value, True
        position += 1


def flag_values(flags: tuple[str, ...]) -> Iterator[tuple[int, str, str]]:
    """(position, flag, value) for each `--flag value`, `--flag=value` or value-less flag in a docker-run list."""
    for position, flag, value, is_flag in _tokens(flags):
        if is_flag:
            yield position, flag, value


def missing_values(flags: tuple[str, ...]) -> list[int]:
    """The positions of flags that take a value and end the list without one: docker would take torchyard's
    next argument as their value."""
    return [
        position
        for position, flag, _, is_flag in _tokens(flags)
        if is_flag and position == len(flags) - 1 and "=" not in flags[position] and flag not in BOOLEAN_DOCKER_RUN
    ]


def stray_words(flags: tuple[str, ...]) -> list[int]:
    """The positions of words that are neither a flag nor the value after one: docker run would take the
    first as the image to run (pulled if missing) and torchyard's own flags and image as its arguments."""
    return [position for position, _, _, is_flag in _tokens(flags) if not is_flag]


MAX_STOP_TIMEOUT = 60


def docker_run(table: Table, key: str, flags: tuple[str, ...], allowed: Collection[str]) -> None:
    """Each flag (`--name` or `--name=value`) must be in SAFE_DOCKER_RUN or the machine's allow-list, with a
    value that cannot reach the host: `--env` sets NAME=value (a bare NAME copies the host's value in, the
    runner's secrets among them), labels leave torchyard's own alone, `--oom-score-adj` is not negative."""
    for position in stray_words(flags):
        raise table.error(
            f"{key}[{position}]",
            f"{describe(flags[position])} is neither a flag nor a flag's value: docker run would take it for "
            "the image to run",
        )
    for position in missing_values(flags):
        raise table.error(
            f"{key}[{position}]",
            f"{describe(flags[position])} takes a value and has none: docker would take torchyard's next "
            "argument for it",
        )
    for position, flag, value in flag_values(flags):
        item = flags[position]
        if flag in WARDENS_DOCKER_RUN:
            raise table.error(
                f"{key}[{position}]",
                f"{describe(item)}: who the tests run as, what starts them and what else runs as root in the "
                "container are the image's warden's to set, never matrix.toml's (whatever machine.toml allows)",
            )
        if flag == "--cpus" and not _at_least_one(value):
            raise table.error(
                f"{key}[{position}]",
                f"--cpus {describe(value)}: below one CPU the container's quota starves the warden that ends it "
                "at its deadline (`--cpuset-cpus` picks which CPUs instead)",
            )
        if flag not in SAFE_DOCKER_RUN and flag not in allowed:
            raise table.error(
                f"{key}[{position}]",
                f"{describe(item)} can give up the container's isolation; a machine that accepts that allows it "
                f'in its own machine.toml ([allow] docker-run = ["{flag}"]), never in matrix.toml',
            )
        if flag in ("--env", "-e") and "=" in value and value.upper().startswith(OWN_VARIABLES):
            raise table.error(
                f"{key}[{position}]",
                f"{flag} {describe(value)}: {OWN_VARIABLES}* variables are torchyard's own (the run's trust "
                "among them), set by the host alone",
            )
        if flag in ("--env", "-e") and value.partition("=")[0].upper().startswith(LOADER_VARIABLES):
            raise table.error(
                f"{key}[{position}]",
                f"{flag} {describe(value)}: the dynamic loader reads it in every process of the container, the "
                "warden that holds its deadline first; a library the image needs goes in its base or its lock",
            )
        if flag in ("--env", "-e") and value.upper().startswith(RUNTIME_VARIABLES):
            raise table.error(
                f"{key}[{position}]",
                f"{flag} {describe(value)}: a device runtime reads it to hand the container GPUs; the devices "
                "an entry gets are its accelerator's, given by torchyard",
            )
        if flag in allowed:
            continue
        if flag in ("--env", "-e") and "=" not in value:
            raise table.error(
                f"{key}[{position}]",
                f"{flag} {describe(value)} copies the host's value into the container; give the value "
                '("NAME=value"): a test never sees the runner\'s environment',
            )
        if flag in ("--label", "-l") and value.startswith("dev.torchyard."):
            raise table.error(f"{key}[{position}]", "labels under dev.torchyard. are torchyard's own")
        if flag == "--oom-score-adj" and value.startswith("-"):
            raise table.error(
                f"{key}[{position}]", f"a negative --oom-score-adj ({value}) shields the container from the OOM killer"
            )
        if flag == "--stop-timeout" and not (value.isdigit() and int(value) <= MAX_STOP_TIMEOUT):
            raise table.error(
                f"{key}[{position}]",
                f"--stop-timeout {describe(value)}: a stop waits at most {MAX_STOP_TIMEOUT} s for the container "
                "(-1 would wait for it forever)",
            )


def _at_least_one(value: str) -> bool:
    try:
        return float(value) >= 1
    except ValueError:
        return False


def checkout_path(table: Table, key: str, folder: Path, value: str) -> Path:
    """`value` as a folder or file inside `folder` (the checkout): relative, without `..`, and reached
    through no link. A pull request edits these keys, and the host reads what they name."""
    relative = PurePosixPath(value)
    if relative.is_absolute() or ".." in relative.parts or "\\" in value:
        raise table.error(key, f"expected a path inside the project's checkout, got {describe(value)}")
    link = linked_component(folder / relative, start=folder)
    if link is not None:
        raise table.error(
            key, f"{describe(value)} goes through a symbolic link ({link}): the host reads it, so never that"
        )
    return folder / relative
