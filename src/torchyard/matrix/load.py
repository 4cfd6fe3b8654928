"""matrix.toml -> `Plan`: parse once with tomllib, validate everything, fail with one pointed line."""

from __future__ import annotations

import dataclasses
import datetime as dt
import re
import tomllib
from collections.abc import Callable, Collection
from dataclasses import fields
from pathlib import Path
from typing import Any, cast

from packaging.utils import canonicalize_name

from torchyard import contract
from torchyard.contract import RunOptions
from torchyard.errors import ConfigError, UsageError
from torchyard.matrix import values
from torchyard.matrix.machine import DURATION, duration_seconds
from torchyard.matrix.project import load_project, load_source, read_requirements
from torchyard.matrix.reader import Table, describe
from torchyard.matrix.schema import (
    INDEX_STRATEGIES,
    AcceleratorConfig,
    Entry,
    ImageRef,
    Index,
    IndexStrategy,
    Plan,
    Project,
    Tolerance,
    VendorPin,
    test_path,
)
from torchyard.names import (
    ACCELERATOR_NAMES,
    CHANGE_KINDS,
    DEFAULT_SUITES,
    NATIVE_ACCELERATORS,
    OPS_ALL,
    OPS_QUICK,
    PRECISIONS,
    SUITE_NAMES,
    AcceleratorName,
    ChangeKind,
    Precision,
    SuiteName,
)
from torchyard.util.checkout import read_checkout_file

PYTHON_VERSION = re.compile(r"3\.(0|[1-9][0-9]*)")
ENTRY_NAME = re.compile(r"[a-z0-9][a-z0-9._-]*")
RESERVED_ENDING = re.compile(r".*-(local|in-place|m[0-9a-f]{8})")
OPERATOR_NAMES = re.compile(r"[A-Za-z0-9_.]+(,[A-Za-z0-9_.]+)*")  # op_db's names: nn.functional.gelu, __radd__
IMAGE_REF = re.compile(r"(?P<name>[a-z0-9][A-Za-z0-9._/:-]*)@(?P<digest>sha256:[0-9a-f]{64})")
DEFAULT_PLATFORM = "x86_64-manylinux_2_28"
DEFAULT_TIMEOUT = "2h"
TOLERANCE_FIELDS = ("max-scaled-error", "max-rel-l2", "min-cosine", "noise-factor")


def load_plan(path: Path, *, allowed_docker_run: Collection[str] = ()) -> Plan:
    """Read and validate `path`; every mistake raises `ConfigError` naming the file and key path."""
    if not path.exists() and not path.is_symlink():
        raise ConfigError(f"{path}: no such file (pass --matrix PATH)")
    try:  # a pull request writes it: never read through a link (its errors would echo the target)
        text = read_checkout_file(path, "matrix.toml").decode("utf-8")
    except UsageError as error:
        raise ConfigError(str(error)) from None
    except UnicodeDecodeError as error:
        raise ConfigError(f"{path}: cannot read: {error}") from None
    return parse_plan(text, path, allowed_docker_run=allowed_docker_run)


def parse_plan(text: str, source: Path, *, allowed_docker_run: Collection[str] = ()) -> Plan:
    """`text` as a plan; `allowed_docker_run` is this machine's allow-list of isolation-giving flags."""
    file = source.name
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"{file}: invalid TOML: {error}") from None
    except RecursionError:
        raise ConfigError(f"{file}: invalid TOML: nested too deeply") from None
    root = Table(data, file)
    indexes = _indexes(root)
    exclude_newer = _timestamp(root, "exclude-newer", required=False)
    accelerators = _accelerators(root, indexes, allowed_docker_run)
    entries = _entries(root, accelerators, exclude_newer, source.parent)
    root.finish()
    return Plan(
        source=source,
        indexes=tuple(indexes.values()),
        accelerators=tuple(accelerators.values()),
        entries=entries,
    )


def _indexes(root: Table) -> dict[str, Index]:
    table = root.table("indexes")
    assert table is not None
    indexes: dict[str, Index] = {}
    for name in table.names():
        url = table.string(name)
        if not re.fullmatch(r"(https?|file)://\S+", url):
            raise table.error(name, f"expected an http(s):// or file:// URL, got {describe(url)}")
        indexes[name] = Index(name, url.rstrip("/"))
    if not indexes:
        raise root.error("indexes", "expected at least one named index")
    return indexes


def _choice(table: Table, key: str, allowed: tuple[str, ...], value: str) -> str:
    if value not in allowed:
        raise table.error(key, f"expected one of {', '.join(allowed)}, got {describe(value)}")
    return value


def _index_names(table: Table, key: str, known: dict[str, Index]) -> tuple[Index, ...]:
    names = table.string_list(key, non_empty=True)
    assert names is not None
    for position, name in enumerate(names):
        if name not in known:
            raise table.error(
                f"{key}[{position}]",
                f"unknown index {describe(name)} (defined in [indexes]: {', '.join(known)})",
            )
    return tuple(known[name] for name in names)


def _base_image(table: Table, accelerator: str) -> ImageRef | None:
    if accelerator in NATIVE_ACCELERATORS:
        if table.value("base-image", required=False) is not None:
            raise table.error("base-image", f"{accelerator} runs natively (no container reaches its device): remove it")
        return None
    return _image(table, "base-image")


def _deployment_target(table: Table) -> str | None:
    target = table.optional_string("deployment-target")
    if target is not None and not re.fullmatch(r"[1-9][0-9]*\.[0-9]+", target):
        raise table.error("deployment-target", f'expected a macOS version such as "14.0", got {describe(target)}')
    return target


def _image(table: Table, key: str) -> ImageRef:
    value = table.string(key)
    match = IMAGE_REF.fullmatch(value)
    if match is None:
        if "@sha256:" not in value:
            raise table.error(key, f"expected an image pinned by digest (name:tag@sha256:...), got {describe(value)}")
        raise table.error(key, f"expected name:tag@sha256:<64 hex digits>, got {describe(value)}")
    return ImageRef(match["name"], match["digest"])


def _vendor(table: Table) -> tuple[VendorPin, ...]:
    vendor = table.table("vendor", required=False)
    if vendor is None:
        return ()
    pins = tuple(VendorPin(name, vendor.string(name)) for name in vendor.names())
    for pin in pins:
        values.vendor_version(vendor, pin.name, pin.version)
    vendor.finish()
    return pins


def _accelerators(
    root: Table, indexes: dict[str, Index], allowed_docker_run: Collection[str]
) -> dict[str, AcceleratorConfig]:
    section = root.table("accelerators")
    assert section is not None
    configs: dict[str, AcceleratorConfig] = {}
    for name in section.names():
        _choice(section, name, ACCELERATOR_NAMES, name)
        table = section.table(name)
        assert table is not None
        strategy = table.string("index-strategy", default="first-index")
        configs[name] = AcceleratorConfig(
            name=cast(AcceleratorName, name),
            base_image=_base_image(table, name),
            indexes=_index_names(table, "indexes", indexes),
            index_strategy=cast(IndexStrategy, _choice(table, "index-strategy", INDEX_STRATEGIES, strategy)),
            platform=table.string("platform", default=DEFAULT_PLATFORM),
            vendor=_vendor(table),
            docker_run=_docker_run(table, allowed_docker_run),
            runs_on=table.string_list("runs-on", non_empty=True) or (),
            deployment_target=_deployment_target(table),
            system_packages=_system_packages(table, name),
        )
        table.finish()
    return configs


APT_NAME = re.compile(r"[a-z0-9][a-z0-9.+-]+")


def _system_packages(table: Table, accelerator: str) -> tuple[str, ...]:
    packages = table.string_list("system-packages", required=False) or ()
    if packages and accelerator in NATIVE_ACCELERATORS:
        raise table.error("system-packages", f"{accelerator} runs natively (no image to install into): remove it")
    for position, package in enumerate(packages):
        if not all(APT_NAME.fullmatch(name) for name in package.split("|")):
            raise table.error(
                f"system-packages[{position}]",
                f'expected a Debian package name, or alternatives as "a|b", got {describe(package)}',
            )
    return packages


def _docker_run(table: Table, allowed: Collection[str]) -> tuple[str, ...]:
    flags = table.string_list("docker-run", required=False) or ()
    values.docker_run(table, "docker-run", flags, allowed)
    return flags


def _timestamp(table: Table, key: str, *, required: bool) -> str | None:
    value: Any = table.value(key, required=False)
    if value is None:
        if required:
            raise table.error(key, "required key is missing (or set exclude-newer at the top level)")
        return None
    if isinstance(value, dt.datetime) and value.tzinfo is not None:
        return value.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    if isinstance(value, dt.date) and not isinstance(value, dt.datetime):
        return f"{value.isoformat()}T00:00:00Z"
    raise table.error(
        key, f"expected a date (2026-11-01) or a UTC date-time (2026-11-01T00:00:00Z), got {describe(value)}"
    )


def _tolerances(table: Table) -> tuple[Tolerance, ...]:
    section = table.table("tolerances", required=False)
    if section is None:
        return ()
    tolerances = []
    for key in section.names():
        if not re.fullmatch(r"[a-z0-9]+\.[a-z0-9_-]+", key):
            raise section.error(
                key, f'expected a key "<dtype>.<backend>" such as "float32.inductor", got {describe(key)}'
            )
        values.tolerance_key(section, key)
        bounds = section.table(key)
        assert bounds is not None
        given = {field: bounds.number(field) for field in TOLERANCE_FIELDS}
        for field, value in given.items():
            values.bound(bounds, field, value)
        bounds.finish()
        tolerances.append(
            Tolerance(key, given["max-scaled-error"], given["max-rel-l2"], given["min-cosine"], given["noise-factor"])
        )
    section.finish()
    return tuple(tolerances)


def _entries(
    root: Table, accelerators: dict[str, AcceleratorConfig], default_exclude_newer: str | None, folder: Path
) -> tuple[Entry, ...]:
    entries: list[Entry] = []
    seen: set[str] = set()
    for table in root.array_of_tables("entry", _entry_label):
        entries.append(_entry(table, accelerators, default_exclude_newer, seen, folder))
    if not entries:
        raise root.error("entry", "expected at least one [[entry]]")
    return tuple(entries)


def _entry_label(position: int, item: dict[str, Any]) -> str:
    name = item.get("name")
    return f'entry "{name}"' if isinstance(name, str) and name else f"entry[{position}]"


def _entry(
    table: Table,
    accelerators: dict[str, AcceleratorConfig],
    default_exclude_newer: str | None,
    seen: set[str],
    folder: Path,
) -> Entry:
    name = table.string("name")
    if not ENTRY_NAME.fullmatch(name):
        raise table.error("name", f"expected lowercase letters, digits, '.', '_' or '-', got {describe(name)}")
    if name == "dependencies":  # torchyard/dependencies:<key> are the trusted dependency images
        raise table.error("name", '"dependencies" is torchyard\'s own image name: choose another')
    if RESERVED_ENDING.fullmatch(name):  # another entry's runs would share its reports, cache and baseline
        raise table.error(
            "name",
            f"{describe(name)} ends as torchyard names another entry's runs (-local and -in-place: its --local and "
            "--in-place runs; -m and 8 hex digits: an entry of a second matrix file): choose another",
        )
    if name in seen:
        raise table.error("name", f"duplicate entry name {describe(name)}")
    seen.add(name)
    accelerator_name = table.string("accelerator")
    if accelerator_name not in accelerators:
        raise table.error(
            "accelerator",
            f"unknown accelerator {describe(accelerator_name)} (defined in [accelerators]: {', '.join(accelerators)})",
        )
    python: Any = table.value("python", required=True)
    if not isinstance(python, str) or not PYTHON_VERSION.fullmatch(python):
        raise table.error("python", f'expected "3.N", got {describe(python)}')
    values.python(table, "python", python)
    requirements = table.string_list("requirements", non_empty=True)
    exclude = _exclude(table)
    assert requirements is not None
    for position, line in enumerate(requirements):
        values.requirement(table, f"requirements[{position}]", line)
    suites = table.string_list("suites", required=False) or DEFAULT_SUITES
    for position, suite in enumerate(suites):
        _choice(table, f"suites[{position}]", SUITE_NAMES, suite)
    exclude_newer = _timestamp(table, "exclude-newer", required=default_exclude_newer is None)
    cases = table.string_list("cases", required=False) or ()
    precision = _choice(table, "precision", PRECISIONS, table.string("precision", default="fp32"))
    if precision == "fp16" and accelerators[accelerator_name].name == "cpu":
        raise table.error(
            "precision", "fp16 on the CPU is refused: CPU kernels would silently compute in full precision; use bf16"
        )
    network = table.optional_string("network")
    timeout = table.string("timeout", default=DEFAULT_TIMEOUT)
    if not DURATION.fullmatch(timeout):
        raise table.error("timeout", f'expected a duration such as "2h", "90m" or "600s", got {describe(timeout)}')
    tests = table.string_list("tests", required=False) or ()
    for position, node in enumerate(tests):
        if node.startswith("-") or not test_path(node):  # pytest would read it as an option of its own
            raise table.error(f"tests[{position}]", f"{describe(node)} is not a pytest node id (a path, or path::test)")
    project = _project(table, folder, tuple(dict.fromkeys(test_path(node) for node in tests)))
    lock_on_runner = table.boolean("lock-on-runner", default=False)
    fail_on_change = table.string_list("fail-on-change", required=False) or ()
    for position, kind in enumerate(fail_on_change):
        _choice(table, f"fail-on-change[{position}]", CHANGE_KINDS, kind)
    options = _options(table, suites, tests)
    accelerator = accelerators[accelerator_name]
    if table.value("base-image", required=False) is not None:  # the entry's own base, for another Python
        accelerator = dataclasses.replace(accelerator, base_image=_base_image(table, accelerator.name))
    entry = Entry(
        name=name,
        accelerator=accelerator,
        python=python,
        requirements=requirements,
        exclude=exclude,
        suites=cast(tuple[SuiteName, ...], suites),
        exclude_newer=exclude_newer or cast(str, default_exclude_newer),
        tolerances=_tolerances(table),
        cases=cases,
        precision=cast(Precision, precision),
        project=project,
        tests=tests,
        network=network,
        timeout=timeout,
        lock_on_runner=lock_on_runner,
        fail_on_change=cast(tuple[ChangeKind, ...], tuple(dict.fromkeys(fail_on_change))),
        options=options,
    )
    table.finish()
    return entry


# What an image cannot be without: excluding one leaves a stack that the image check then refuses.
NOT_EXCLUDED = frozenset({"torch"})
PACKAGE_NAME = re.compile(r"[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?")  # PEP 508's name


def _exclude(table: Table) -> tuple[str, ...]:
    """`exclude`: package names (PEP 503) the lock leaves out, whatever requires them."""
    names = table.string_list("exclude", required=False) or ()
    for position, name in enumerate(names):
        if not PACKAGE_NAME.fullmatch(name):
            raise table.error(f"exclude[{position}]", f"{describe(name)} is not a package name")
        if canonicalize_name(name) in NOT_EXCLUDED:
            raise table.error(f"exclude[{position}]", f"{describe(name)} is the stack itself: it cannot be left out")
    return names


def _options(table: Table, suites: tuple[str, ...], tests: tuple[str, ...]) -> RunOptions:
    """The entry's `RunOptions`, each read by its type and its reader (`contract.Carried`) from its key."""
    read: dict[str, Any] = {}  # each of its field's type, as its reader made it
    for item in fields(RunOptions):
        how, key = contract.carried(item.name), contract.matrix_key(item.name)
        value = table.value(key, required=False)
        if value is None:
            read[item.name] = item.default
            continue
        if how.needs and how.needs != "tests" and how.needs not in suites:
            raise table.error(
                key, f'only for an entry that runs the {how.needs} suite: add "{how.needs}" to its suites'
            )
        read[item.name] = READERS[how.reader or str(item.type)](table, key, value, how)
        if how.needs == "tests" and read[item.name] and not tests:  # a selection: checked as text first
            raise table.error(key, "selects among the entry's own `tests`, and it has none")
    return RunOptions(**read)


def _line(table: Table, key: str, value: object, how: contract.Carried) -> str:
    """One line of printable text (a pytest expression, read by pytest in the image)."""
    text = table.optional_string(key) or ""
    if any(not char.isprintable() for char in text):
        raise table.error(key, f"{describe(text)}: one line of printable characters")
    return text


def _boolean(table: Table, key: str, value: object, how: contract.Carried) -> bool:
    return table.boolean(key, default=False)


def _items(table: Table, key: str, value: object, how: contract.Carried) -> tuple[str, ...]:
    items = table.string_list(key, non_empty=True)
    assert items is not None
    for position, item in enumerate(items):
        if how.choices:
            _choice(table, f"{key}[{position}]", how.choices, item)
    return items


def _positive(table: Table, key: str, value: object, how: contract.Carried) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise table.error(key, f"expected a number of {key.rpartition('-')[2]} (1 or more), got {describe(value)}")
    return value


def _duration_or_false(table: Table, key: str, value: object, how: contract.Carried) -> int:
    """A duration as seconds, or false for none (0 seconds)."""
    if value is False:
        return 0
    if not isinstance(value, str) or not DURATION.fullmatch(value):
        raise table.error(key, f'expected a duration such as "60s" or "5m", or false, got {describe(value)}')
    return duration_seconds(value)


def _operators(table: Table, key: str, value: object, how: contract.Carried) -> str:
    operators = table.string(key)
    if operators not in (OPS_QUICK, OPS_ALL) and not OPERATOR_NAMES.fullmatch(operators):
        raise table.error(
            key, f'expected "{OPS_QUICK}", "{OPS_ALL}" or op_db names, comma-separated, got {describe(operators)}'
        )
    return operators


# How the loader reads a `RunOptions` field: by its reader's name, else by its type.
READERS: dict[str, Callable[[Table, str, object, contract.Carried], object]] = {
    "str": _line,
    "bool": _boolean,
    "tuple[str, ...]": _items,
    "positive": _positive,
    "duration-or-false": _duration_or_false,
    "operators": _operators,
}


def _project(table: Table, folder: Path, tests: tuple[str, ...]) -> Project | None:
    """`project = "."`, `project = { path = ".", extras = [...], groups = [...] }` (a package) or
    `project = { source = "." }` (a source folder), either with `requirements-files`; paths relative to
    matrix.toml, inside its checkout."""
    value = table.value("project", required=False)
    if value is None:
        if tests:
            raise table.error("tests", "needs `project` (the tests are the project's own, run from its folder)")
        return None
    if isinstance(value, str):
        return load_project(_root(table, table, "project", folder, value, tests=tests), (), (), tests)
    section = table.table("project")
    assert section is not None
    path = section.string("path", default=".")
    source = section.optional_string("source")
    extras = section.string_list("extras", required=False) or ()
    groups = section.string_list("groups", required=False) or ()
    files = section.string_list("requirements-files", required=False) or ()
    section.finish()
    listed: list[str] = []
    for position, file in enumerate(files):
        values.checkout_path(section, f"requirements-files[{position}]", folder, file)
        listed += read_requirements(folder, file)
    if source is None:
        return load_project(_root(table, section, "path", folder, path, tests=tests), extras, groups, tests, listed)
    if section.value("path", required=False) is not None:
        raise section.error("source", "a project is a package (`path`) or a source folder (`source`), not both")
    for key, names in (("extras", extras), ("groups", groups)):
        if names:
            raise section.error(
                key, "a source folder has no pyproject.toml [project] to take them from: list what it needs in "
                "requirements-files"
            )  # fmt: skip
    return load_source(_root(table, section, "source", folder, source, tests=tests), listed)


def _root(table: Table, where: Table, key: str, folder: Path, path: str, *, tests: tuple[str, ...]) -> Path:
    """The project's folder (`where > key`), and its tests inside it: in the checkout, reached through no link."""
    root = values.checkout_path(where, key, folder, path).resolve()
    for position, tested in enumerate(tests):
        values.checkout_path(table, f"tests[{position}]", root, tested)
    if not root.is_dir():
        what = "a folder" if key == "source" else "a folder holding pyproject.toml"
        raise where.error(key, f"expected {what}, got {describe(path)} ({root})")
    if key == "source":  # a package's tests are checked with its pyproject.toml, which names them
        for position, tested in enumerate(tests):
            if not (root / tested).exists():
                raise table.error(f"tests[{position}]", f"{describe(tested)} does not exist in {root}")
    return root
