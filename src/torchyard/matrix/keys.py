"""Every key of matrix.toml and machine.toml, and every environment variable a user sets, as data.

The reference pages (`docs/reference/`) are generated from these lists and from the loaders themselves: each
key's `example` is loaded to learn whether it is a lock input (the lock digest moves), and its `bad` value is
loaded to show the exact error it gets. A unit test checks that the loaders read exactly the keys listed here.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from torchyard.names import (
    CHANGE_KINDS,
    COMPILE_MODES,
    DEFAULT_SUITES,
    LOCALIZE_SECONDS_DEFAULT,
    OPS_ALL,
    OPS_OPERATORS_DEFAULT,
    OPS_QUICK,
    OPS_SAMPLES_DEFAULT,
    OPT_IN_SUITES,
    PRECISIONS,
    SUITE_NAMES,
)

REQUIRED = "required"


@dataclass(frozen=True)
class Key:
    """One key: where it lives, its type, its default, what it means, a valid value and a refused one.

    `table` is a dotted path with `<...>` for a name the user picks (`accelerators.<name>`); `name` is the key,
    or `<...>` for a table of user-named keys, whose `example_name` is the name the generator uses.
    `alongside` holds other keys of the same table that the example and the bad value need.
    """

    table: str
    name: str
    type: str
    default: str
    means: str
    example: Any
    bad: Any
    example_name: str = ""
    bad_name: str = ""  # for a table of user-named keys: a name the loader refuses (with `example` as its value)
    alongside: dict[str, Any] = field(default_factory=dict)

    @property
    def written(self) -> str:
        """The key as a user writes it in the file."""
        return self.example_name or self.name


def _one_of(names: tuple[str, ...]) -> str:
    return "one of " + ", ".join(f"`{name}`" for name in names)


MATRIX_KEYS: tuple[Key, ...] = (
    # The top level.
    Key("", "exclude-newer", "date or UTC date-time", "required unless every entry sets its own",
        "resolution cut-off for every lock (uv's `--exclude-newer`); an entry may set its own",
        dt.date(2026, 10, 1), "last week"),
    # [indexes]
    Key("indexes", "<name>", "http(s):// or file:// URL", "at least one",
        "a named package index; the accelerators name indexes, and a machine's mirror can replace one by name",
        "https://mirror.example.org/simple", "ftp://mirror.example.org", example_name="pypi"),
    # [accelerators.<name>]
    Key("accelerators.<name>", "base-image", "image pinned by digest", "required (none for a native accelerator)",
        "the image the entries of this accelerator build on (an entry may name its own): `name[:tag]@sha256:<64 hex>`",
        "docker.io/library/debian:trixie-slim@sha256:" + "1" * 64, "debian:bookworm-slim"),
    Key("accelerators.<name>", "indexes", "array of index names", REQUIRED,
        "the indexes to resolve and install from, names from `[indexes]`, in order of priority (with "
        "`first-index`, a package comes from the first that has it)",
        ["pypi", "extra"], ["pypy"]),
    Key("accelerators.<name>", "index-strategy", "string", "`first-index`",
        "uv's `--index-strategy`: " + _one_of(("first-index", "unsafe-first-match", "unsafe-best-match")),
        "unsafe-best-match", "best"),
    Key("accelerators.<name>", "platform", "string", "`x86_64-manylinux_2_28`",
        "uv's `--python-platform` for the lock", "aarch64-manylinux_2_28", ""),
    Key("accelerators.<name>", "deployment-target", "macOS version", "none",
        "`MACOSX_DEPLOYMENT_TARGET` for resolving macOS wheels", "14.0", "14"),
    Key("accelerators.<name>", "runs-on", "array of runner labels", REQUIRED,
        "the CI runner labels this accelerator's jobs run on (hosted: one GitHub-hosted label; else self-hosted)",
        ["self-hosted", "linux", "x64", "gpu", "cuda"], []),
    Key("accelerators.<name>", "system-packages", "array of Debian package names", "`[]`",
        'apt packages the image needs; `"a|b"` takes the first the base\'s apt sources have',
        ["libze1", "libze-intel-gpu1|intel-level-zero-gpu"], ["Level Zero"]),
    Key("accelerators.<name>", "docker-run", "array of `docker run` flags", "`[]`",
        "extra flags after the accelerator's own: only resource, environment and label flags, and only to "
        "tighten; a flag that could give up isolation needs the machine's `[allow] docker-run`",
        ["--shm-size", "8g"], ["--privileged"]),
    Key("accelerators.<name>.vendor", "<package>", 'PEP 440 version or `"*"`', "none",
        "a package the base image ships and that must be kept (resolved against, never replaced); "
        '`"*"` keeps whatever version the base has',
        "2.9.1", "latest", example_name="torch"),
    # [[entry]]
    Key("entry", "name", "string", REQUIRED,
        "the entry's unique name: lowercase letters, digits, `.`, `_`, `-`; not ending in `-local`, `-in-place` "
        "or `-m` and 8 hex digits (the names of other entries' runs)",
        "cpu-py312", "CPU"),
    Key("entry", "accelerator", "string", REQUIRED, "a table under `[accelerators]`", "cuda", "tpu"),
    Key("entry", "python", '"3.N"', REQUIRED, "the entry's Python, one torchyard supports", "3.12", 3.12),
    Key("entry", "base-image", "image pinned by digest", "its accelerator's",
        "this entry's own base (for another Python than its accelerator's base has): `name[:tag]@sha256:<64 hex>`",
        "docker.io/library/python:3.13-slim@sha256:" + "2" * 64, "python:3.13-slim"),
    Key("entry", "requirements", "array of PEP 508 requirements", "required, not empty",
        "what the entry's lock resolves (with the project's dependencies, if any)",
        ["torch==2.14.*", "pytest>=8", "numpy"], ["torch=2.14"]),
    Key("entry", "suites", "array of suite names",
        ", ".join(f"`{name}`" for name in DEFAULT_SUITES)
        + " (every suite but the opt-in " + ", ".join(f"`{name}`" for name in sorted(OPT_IN_SUITES)) + ")",
        "the suites the entry runs: " + _one_of(SUITE_NAMES), ["export", "parity"], ["exports"]),
    Key("entry", "exclude-newer", "date or UTC date-time", "the top level's",
        "this entry's resolution cut-off", dt.datetime(2026, 9, 1, 12, tzinfo=dt.UTC), "2026-13-01"),
    Key("entry", "cases", "array of module names", "`[]`",
        'modules with your own models (each exposing `CASES`), or `"module:attr"`', ["mypkg.torchyard_cases"], [""]),
    Key("entry", "precision", "string", "`fp32`",
        _one_of(PRECISIONS) + "; fp16 is refused on a CPU entry", "bf16", "fp16"),
    Key("entry", "project", "folder, or `{ path, extras, groups }`, or `{ source }`", "none",
        "the project under test, relative to matrix.toml: a package (a folder with pyproject.toml), built into a "
        "wheel in a sealed container, its dependencies joining the lock; or a source folder (`source`)",
        ".", "nowhere"),
    Key("entry", "exclude", "array of package names", "`[]`",
        "packages the lock leaves out whatever requires them (uv's `--excludes`), for a dependency's dependency the "
        "image does not need (triton on a CPU entry); torch cannot be", ["triton"], ["torch"]),
    Key("entry", "tests", "array of pytest node ids", "`[]`",
        "the project's own tests, run in the image beside the suites (needs `project`): paths, or "
        "`path::test` node ids", ["tests"], "tests", alongside={"project": "."}),
    Key("entry", "tests-markers", "string", "none",
        "a pytest marker expression (as `-m` takes it) that selects among the project's own tests; torchyard's "
        "suites and self-tests are selected apart, never by it", "not slow", ["not slow"],
        alongside={"project": ".", "tests": ["tests"]}),
    Key("entry", "tests-keyword", "string", "none",
        "a pytest keyword expression (as `-k` takes it) that selects among the project's own tests",
        "not dtw", ["not dtw"], alongside={"project": ".", "tests": ["tests"]}),
    Key("entry", "builtin-cases", "boolean", "`true`", "`false` leaves torchyard's built-in corpus out",
        False, "no"),
    Key("entry", "compile-modes", "array of `torch.compile` modes", "`[\"default\"]`",
        "each mode is a backend of the compile suite: " + _one_of(COMPILE_MODES),
        ["default", "max-autotune-no-cudagraphs"], ["turbo"]),
    Key("entry", "fullgraph", "boolean", "`false`",
        "`true` holds every case to one graph under `torch.compile` (as export-like deployment needs): a graph "
        "break fails the result, where by default it is counted and named", True, "yes"),
    Key("entry", "network", "string (why)", "none",
        "why the entry's tests need the network; they get one only where the machine allows it "
        "(`[allow] network = true`) and the run is trusted", "downloads its weights from the hub", ""),
    Key("entry", "timeout", "duration", '`"2h"`',
        "stop the run after this long (capped by the machine's `[limits] timeout`)", "90m", "2 hours"),
    Key("entry", "fail-on-change", "array of change kinds", "`[]`",
        "the kinds of change against the baseline run (the entry's last trusted run, or `--baseline`) that fail "
        "the run; the others are reported: " + _one_of(CHANGE_KINDS) + "; an untrusted run fails on the trusted "
        "entry's kinds too", ["graph-breaks", "delegation"], ["slower"]),
    Key("entry", "lock-on-runner", "boolean", "`false`",
        "no committed lock: the entry's own runner, which reaches its indexes, locks it before its image",
        True, 1),
    Key("entry", "localize-timeout", "duration or `false`", f'`"{LOCALIZE_SECONDS_DEFAULT}s"`',
        "the longest localization (where a failing backend first diverges) may take for one failing result; "
        "`false`: none", "5m", "soon"),
    Key("entry", "ops-operators", "string", f'`"{OPS_OPERATORS_DEFAULT}"`',
        f"the ops suite's operators: `{OPS_QUICK}` (a few dozen across families), `{OPS_ALL}` (the image's torch's "
        "`op_db`) or op_db names, comma-separated (only with `ops` in `suites`)", "nn.functional.gelu,add", "gelu tanh",
        alongside={"suites": ["ops"]}),
    Key("entry", "ops-samples", "integer", f"`{OPS_SAMPLES_DEFAULT}`",
        "samples of each operator the ops suite runs (only with `ops` in `suites`)", 4, 0,
        alongside={"suites": ["ops"]}),
    Key("entry.project", "path", "folder", '`"."`', "the project's folder, relative to matrix.toml", "sub",
        "nowhere"),
    Key("entry.project", "extras", "array of extra names", "`[]`",
        "the project's extras whose dependencies join the lock", ["sim"], "sim"),
    Key("entry.project", "groups", "array of dependency-group names", "`[]`",
        "the project's dependency groups whose requirements join the lock", ["test"], "test",
        ),
    Key("entry.project", "source", "folder", "none",
        "instead of `path`, for a repository of modules and scripts with no package (no pyproject.toml "
        "`[project]`): its files (what git tracks and the new files .gitignore does not exclude, minus "
        "`.dockerignore`) are the image's `/workspace`, on the import path, as its own scripts import them", ".",
        "nowhere"),
    Key("entry.project", "requirements-files", "array of paths", "`[]`",
        "requirements files (relative to matrix.toml) whose requirements join the lock, hashed as every pin: "
        "PEP 508 lines and `-r` includes only (no index, editable or hash options)",
        ["requirements.txt"], ["../requirements.txt"]),
    Key("entry.tolerances", "<dtype>.<backend>", "table of bounds", "the built-in bounds",
        "parity bounds for one dtype and backend (`*` for every backend), overriding the built-in ones "
        "field by field", {"max-rel-l2": 1e-4}, None, example_name="float32.inductor", bad_name="float32.indcutor"),
    Key("entry.tolerances.<key>", "max-scaled-error", "number >= 0", "the built-in bound",
        "the largest error allowed, scaled by the reference's largest magnitude", 1e-4, -1.0),
    Key("entry.tolerances.<key>", "max-rel-l2", "number >= 0", "the built-in bound",
        "the largest relative L2 error allowed", 1e-5, float("inf")),
    Key("entry.tolerances.<key>", "min-cosine", "number in [-1, 1]", "the built-in bound",
        "the smallest cosine similarity allowed", 0.99999, 1.5),
    Key("entry.tolerances.<key>", "noise-factor", "number >= 0", "8 for float32; 0 (off) for bfloat16 and float16, "
        "and where the entry sets a bound of the key and not this",
        "hold each output to this many times eager's own error against float64 on it (the two error bounds; "
        "the others stay the ceiling); 0 turns the noise rule off", 8, -1.0),
)  # fmt: skip

MACHINE_KEYS: tuple[Key, ...] = (
    Key("mirrors", "<index>", "URL, or an absolute folder of wheels", "none",
        "where this machine reads the named index from: a URL replaces it, a folder is a flat wheel folder",
        "https://mirror.internal/simple", "mirror.internal/simple", example_name="pypi"),
    Key("base-images", "<entry or accelerator>", "image reference", "none",
        "a base image that replaces matrix.toml's on this machine, by entry name or accelerator name",
        "torchyard/base:bookworm", 5, example_name="cpu"),
    Key("registry", "name", "`host[:port]/path`", "none",
        "the registry this machine's runners share images and layers through", "127.0.0.1:5000/team",
        "https://user:secret@registry.internal"),
    Key("limits", "memory", "size (`16g`)", "75% of the engine's memory", "a test container's memory (and swap)",
        "16g", "lots"),
    Key("limits", "pids", "whole number >= 64", "`4096`", "the most processes a test container may run", 8192, 8),
    Key("limits", "tmp", "size", '`"4g"`', "the size of the container's private `/tmp` (a tmpfs)", "8g", "8 GB"),
    Key("limits", "home", "size", '`"1g"`', "the size of its private home folder (a tmpfs)", "2g", "-1"),
    Key("limits", "reports", "size", '`"512m"`',
        "the most a run may write in its reports folder, counted while it runs: past it the container is stopped "
        "and the reports emptied",
        "1g", "1 GB"),
    Key("limits", "cache", "size", '`"32g"`',
        "the most an untrusted run's own cache volume may hold while it runs (counted where the host can read the "
        "engine's volumes): past it the container is stopped", "64g", "a lot"),
    Key("limits", "timeout", "duration", '`"6h"`', "the most an entry's `timeout` may be", "12h", "forever"),
    Key("allow", "docker-run", "array of `docker run` flags", "`[]`",
        "flags matrix.toml may use although they give up isolation (matrix.toml can never allow them itself)",
        ["--privileged"], ["privileged"]),
    Key("allow", "network", "boolean", "`false`",
        "whether an entry's `network` key may give its trusted runs a network", True, "yes"),
)  # fmt: skip


@dataclass(frozen=True)
class Variable:
    name: str
    means: str


# The variables a user or a workflow sets; the ones the host passes into images are the contract's own.
ENVIRONMENT: tuple[Variable, ...] = (
    Variable("TORCHYARD_MACHINE_FILE", "machine.toml's path (default: `$XDG_CONFIG_HOME/torchyard/machine.toml`)"),
    Variable("TORCHYARD_MIRRORS", "`NAME=URL-or-folder` pairs, whitespace-separated; win over `[mirrors]`"),
    Variable("TORCHYARD_FIND_LINKS", "local wheel folders tried before any index at install (hashes still decide)"),
    Variable("TORCHYARD_BASE_IMAGES", "`NAME=IMAGE` pairs by entry or accelerator; win over `[base-images]`"),
    Variable("TORCHYARD_REGISTRY", "the shared registry; wins over `[registry] name`"),
    Variable("TORCHYARD_REGISTRY_USERNAME", "the registry's user, when Docker's own credential store has none"),
    Variable("TORCHYARD_REGISTRY_PASSWORD", "its password: never in an argument, label, layer or log line"),
    Variable("TORCHYARD_TRUST", "`trusted` or `untrusted`: the run's trust when `--trust` is not given"),
    Variable("TORCHYARD_TRUSTED_MATRIX", "the trusted matrix.toml: an untrusted run's bases, indexes, runner labels"),
    Variable("TORCHYARD_DOCKER", "the `docker` client to build with, when several are on `PATH`"),
    Variable("TORCHYARD_JOB_ENDS_AT", "the CI job's end, a Unix time (start + timeout-minutes): runs end before it"),
    Variable("TORCHYARD_ARTIFACT_CACHE", "`off`: lower every program again (no artifact cache, no stored patterns)"),
)  # fmt: skip
