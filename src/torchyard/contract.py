"""The contract between the host and the in-image side: environment variables, paths, the pytest
command line and report file names. Stdlib only: the host builds runs from it, the image reads it.

Both the container path and the venv path call `pytest_args` and `suite_environment`, so a run is the
same run wherever it happens. Every variable that crosses into the image is one row of `SETTINGS`: the host's
environment, the plugin's options and the replay fingerprint are all built from it.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Literal, assert_never

from torchyard.names import (
    COMPILE_MODES,
    HARNESS,
    LOCALIZE_SECONDS_DEFAULT,
    OPS_OPERATORS_DEFAULT,
    OPS_SAMPLES_DEFAULT,
    PRECISIONS,
    PROJECT,
)

# The variables that cross into the image, each described by its row of `SETTINGS`.
ACCELERATOR = "TORCHYARD_ACCELERATOR"
PRECISION = "TORCHYARD_PRECISION"
REPORT_DIR = "TORCHYARD_REPORT_DIR"
TOLERANCES = "TORCHYARD_TOLERANCES"
CASES = "TORCHYARD_CASES"
SUITES = "TORCHYARD_SUITES"
VENDOR_RECORD = "TORCHYARD_VENDOR_RECORD"
UNLOCKED = "TORCHYARD_UNLOCKED"
INDUCTOR_CACHE = "TORCHYARD_INDUCTOR_CACHE"
ARTIFACT_CACHE = "TORCHYARD_ARTIFACT_CACHE"
REUSE_RESULTS = "TORCHYARD_REUSE_RESULTS"
# Every variable of torchyard's own begins so (a tuple: the settings' test reads this module's strings as variables).
OWN_PREFIXES = ("TORCHYARD_",)
RERUN = "TORCHYARD_RERUN"
RERUN_OPTION = "--torchyard-rerun"  # `torchyard test --rerun` passes it
SELF_TEST_PROOF = "TORCHYARD_SELF_TEST_PROOF"
SELF_TESTS_STORE = "self-tests"  # the proofs' folder in the entry's cache (a new cache may start with a sibling's)
STACK = "TORCHYARD_STACK"
IMAGE_ID = "TORCHYARD_IMAGE_ID"
TRUST = "TORCHYARD_TRUST"

# How a value is written into its variable: items joined by commas, a boolean as "1" or "0", JSON, or as it is.
Encoding = Literal["list", "bool", "json", "string", "int"]


@dataclass(frozen=True)
class Setting:
    """A value that crosses into the image, carried by one environment variable."""

    variable: str
    field: str | None  # the `Entry` field it comes from; None where the run or the image sets it
    option: str | None  # the plugin's pytest option, which wins over the variable; a boolean's turns it over
    encoding: Encoding
    verdicts: bool  # whether it decides the run's verdicts: then it goes into the replay fingerprint
    means: str
    default: str = ""  # what the in-image side takes where the variable is unset, encoded
    choices: tuple[str, ...] = ()  # the option's allowed values, where they are a closed set

    def encode(self, value: object) -> str:
        """`value` (the field's, as a plain value) as the variable carries it."""
        match self.encoding:
            case "list":
                if isinstance(value, Sequence) and not isinstance(value, str):
                    return ",".join(str(item) for item in value)
            case "bool":
                if isinstance(value, bool):
                    return "1" if value else "0"
            case "json":
                return json.dumps(value, sort_keys=True)
            case "string":
                if isinstance(value, str):
                    return value
            case "int":
                if isinstance(value, int) and not isinstance(value, bool):
                    return str(value)
            case _:
                assert_never(self.encoding)
        raise TypeError(f"{self.variable}: {value!r} is not a {self.encoding}")


@dataclass(frozen=True)
class Carried:
    """How one of an entry's `RunOptions` crosses into the image: what it means, whether it decides verdicts,
    and how the host's loader reads it from matrix.toml."""

    means: str
    verdicts: bool
    key: str = ""  # its matrix.toml key where that is not the field's name with dashes
    reader: str = ""  # the loader's reader (`matrix.load.READERS`) beyond its type's own checks
    needs: str = ""  # what the entry must have for the key to mean anything: "tests", or a suite's name
    choices: tuple[str, ...] = ()  # a list's allowed items, where they are a closed set
    # It chooses which results a run has (which tests, cases, columns, operators), not what one result is: left
    # out of each result's key (`result_deciding`). Every other option that decides verdicts is in that key.
    selects: bool = False


def _carried(default: object, **how: Any) -> Any:
    return field(default=default, metadata={"carried": Carried(**how)})


@dataclass(frozen=True)
class RunOptions:
    """An entry's options that cross into the image as they are, each declared once, here: its field is its
    matrix.toml key (dashes for underscores, unless `Carried.key` says otherwise), its variable
    `TORCHYARD_<FIELD>` and its pytest option `--torchyard-<field>` (`--torchyard-no-<field>` turns off a boolean
    that is on by default). The host's loader reads each from matrix.toml into `Entry.options`, the in-image
    side from its environment into `RunSettings.options`, once."""

    # fmt: off
    tests_markers: str = _carried("", verdicts=True, needs="tests", selects=True,
        means="a pytest marker expression that selects among the project's own tests (`-m`)")
    tests_keyword: str = _carried("", verdicts=True, needs="tests", selects=True,
        means="a pytest keyword expression that selects among the project's own tests (`-k`)")
    builtin_cases: bool = _carried(True, verdicts=True, selects=True, means="leave the built-in corpus out")
    compile_modes: tuple[str, ...] = _carried(("default",), verdicts=True, choices=COMPILE_MODES, selects=True,
        means="comma-separated torch.compile modes, each a backend column")
    fullgraph: bool = _carried(False, verdicts=True,
        means="every case compiles to one graph (torch.compile's fullgraph, as export-like deployment needs): a "
        "graph break fails it, where by default it is counted")
    ops_operators: str = _carried(OPS_OPERATORS_DEFAULT, verdicts=True, needs="ops", reader="operators",
        selects=True,
        means="the ops suite's operators: quick (a few dozen across families), all (the running torch's op_db), "
        "or names, comma-separated")
    ops_samples: int = _carried(OPS_SAMPLES_DEFAULT, verdicts=True, needs="ops", reader="positive", selects=True,
        means="samples of each operator the ops suite runs")
    localize_seconds: int = _carried(LOCALIZE_SECONDS_DEFAULT, verdicts=False, key="localize-timeout",
        reader="duration-or-false",
        means="the longest localization may take for one failing result, in seconds (0: none)")
    # fmt: on


# The encoding of each field's type (the annotations are strings: `from __future__ import annotations`).
_ENCODINGS: dict[str, Encoding] = {"str": "string", "bool": "bool", "int": "int", "tuple[str, ...]": "list"}


def carried(name: str) -> Carried:
    """How the `RunOptions` field `name` crosses."""
    found: Carried = next(item.metadata["carried"] for item in fields(RunOptions) if item.name == name)
    return found


def result_deciding(options: RunOptions) -> dict[str, object]:
    """The options that decide what one result is, by their declaration (`Carried.verdicts`, not `selects`):
    each result's key holds them, so an option added to `RunOptions` joins the key with no edit of the key's
    code."""
    return {
        item.name: getattr(options, item.name)
        for item in fields(options)
        if "carried" in item.metadata and item.metadata["carried"].verdicts and not item.metadata["carried"].selects
    }


def matrix_key(name: str) -> str:
    """The matrix.toml key of the `RunOptions` field `name`."""
    return carried(name).key or name.replace("_", "-")


def option_variable(name: str) -> str:
    """The variable that carries the `RunOptions` field `name`."""
    return f"TORCHYARD_{name.upper()}"


def _option_row(item: Any) -> Setting:
    how: Carried = item.metadata["carried"]
    encoding = _ENCODINGS[str(item.type)]
    flag = f"--torchyard-{'no-' if item.default is True else ''}{item.name.replace('_', '-')}"
    row = Setting(
        option_variable(item.name),
        item.name,
        flag,
        encoding,
        verdicts=how.verdicts,
        means=how.means,
        choices=how.choices if encoding != "list" else (),
    )
    return dataclasses.replace(row, default=row.encode(item.default))


ENTRY_OPTIONS: tuple[Setting, ...] = tuple(_option_row(item) for item in fields(RunOptions))


SETTINGS: tuple[Setting, ...] = (
    Setting(ACCELERATOR, "accelerator", "--torchyard-accelerator", "string", verdicts=True, default="cpu",
            means="the accelerator the entry targets (its name)"),
    Setting(PRECISION, "precision", "--torchyard-precision", "string", verdicts=True, default="fp32",
            choices=PRECISIONS, means="the precision the cases compute in"),
    Setting(REPORT_DIR, None, "--torchyard-report-dir", "string", verdicts=False, default="reports/local",
            means="the folder the reports are written to"),
    Setting(TOLERANCES, "tolerances", "--torchyard-tolerances", "json", verdicts=True,
            means='JSON overrides: {"float32.inductor": {"max-rel-l2": 1e-4}}'),
    Setting(CASES, "cases", "--torchyard-cases", "list", verdicts=True,
            means="comma-separated case modules (or module:attr)"),
    Setting(SUITES, "suites", "--torchyard-suites", "list", verdicts=True,
            means="comma-separated: the suites that must each pass a test"),
    *ENTRY_OPTIONS,
    Setting(VENDOR_RECORD, None, "--torchyard-vendor-record", "string", verdicts=False,
            means="the base image's vendor record, which the probe checks (the image sets it)"),
    Setting(UNLOCKED, None, None, "string", verdicts=False,
            means="set for a run in an unlocked environment: the entry's lockfile path, or empty where it has none"),
    Setting(INDUCTOR_CACHE, None, None, "string", verdicts=False,
            means="the entry's cache root: inductor's caches and artifacts/"),
    Setting(ARTIFACT_CACHE, None, None, "string", verdicts=False, means='"off": lower every program again'),
    Setting(REUSE_RESULTS, None, None, "bool", verdicts=False, default="0",
            means="replay the last verdicts when nothing deciding them changed"),
    Setting(RERUN, None, RERUN_OPTION, "bool", verdicts=False, default="0",
            means="evaluate every result: none replayed from the result cache, none kept in it"),
    Setting(STACK, None, None, "string", verdicts=False,
            means="the image's stack: its base's digest and its lock's layer keys (the image sets it)"),
    Setting(SELF_TEST_PROOF, None, None, "string", verdicts=False,
            means="the file of the self-tests' proof (`proofs`): the in-image entry point sets it for its own run"),
    # In a venv the installed distributions take its place (`replay.fingerprint`).
    Setting(IMAGE_ID, None, None, "string", verdicts=True, means="the image a container runs"),
    Setting(TRUST, None, None, "string", verdicts=False, default="trusted",
            means="trusted or untrusted: what the run's caches are scoped by (torchyard.trust)"),
)  # fmt: skip
_BY_VARIABLE = {row.variable: row for row in SETTINGS}


def setting(variable: str) -> Setting:
    """The row of `SETTINGS` for `variable`."""
    return _BY_VARIABLE[variable]


@dataclass(frozen=True)
class Values:
    """Settings' values as their variables carry them (an environment, or the plugin's options by variable),
    read back as what they encode; a setting without a value has its default."""

    encoded: Mapping[str, str]

    def text(self, variable: str) -> str:
        return self.encoded.get(variable, setting(variable).default)

    def items(self, variable: str) -> tuple[str, ...]:
        """A list's items (none in an empty value)."""
        assert setting(variable).encoding == "list", variable
        return tuple(item for item in self.text(variable).split(",") if item)

    def number(self, variable: str) -> int:
        """An int's value; ValueError where its text is not a whole number (0 or more)."""
        assert setting(variable).encoding == "int", variable
        text = self.text(variable)
        if not text.isdigit():
            raise ValueError(f"{text!r} is not a whole number")
        return int(text)

    def enabled(self, variable: str) -> bool:
        """A boolean's state: "1" or "0", the default for anything else."""
        assert setting(variable).encoding == "bool", variable
        return {"1": True, "0": False}.get(self.text(variable), setting(variable).default == "1")

    def options(self) -> RunOptions:
        """The entry's options, each from its variable (ValueError naming the option where a number is not one)."""
        decoded: dict[str, Any] = {}  # each of its field's type, as its encoding reads back
        for row in ENTRY_OPTIONS:
            assert row.field is not None
            match row.encoding:
                case "bool":
                    decoded[row.field] = self.enabled(row.variable)
                case "int":
                    try:
                        decoded[row.field] = self.number(row.variable)
                    except ValueError as error:
                        raise ValueError(f"{row.option}: {error}") from None
                case "list":
                    decoded[row.field] = self.items(row.variable)
                case _:
                    decoded[row.field] = self.text(row.variable)
        return RunOptions(**decoded)


AUTOLOAD_OFF = "PYTEST_DISABLE_PLUGIN_AUTOLOAD"  # pytest's own: no plugin loads unless named with -p
# Python's own, fixed for the run: a model's state built by iterating a set (a logger's folders, a table
# made from a set of names) is then the same in every run, so its artifact key is too (it changed each run).
HASH_SEED = {"PYTHONHASHSEED": "0"}

# Inside the image (the Dockerfile creates these; a unit test checks that it does).
IMAGE_REPORTS = "/reports"
IMAGE_CACHE = "/cache/inductor"
# inductor keeps its precompiled C++ headers in `<temp dir>/torchinductor_<user>/`, outside its cache
# folder and so on the run's private /tmp; the entry's volume is mounted there too (the user's name fixed
# by LOGNAME), so a warm container does not compile them again.
IMAGE_LOGNAME = "torchyard"
IMAGE_INDUCTOR_DEFAULT = f"/tmp/torchinductor_{IMAGE_LOGNAME}"
IMAGE_PROJECT = "/workspace"
IMAGE_HOME = "/home/torchyard"
IMAGE_INIMAGE = "/opt/torchyard/inimage/torchyard/inimage"  # the in-image package, on the image's path
# Its test folders: the suites a user reads, and the harness's own self-tests (`torchyard.inimage.TEST_DIRS`).
TEST_FOLDERS = ("suites", "selftests")
IMAGE_ENTRYPOINT = ("/opt/torchyard/venv/bin/python", "-m", "torchyard.inimage")  # the Dockerfile's ENTRYPOINT
IMAGE_TIMEOUT = "/usr/bin/timeout"  # the base's, by its path: the image's PATH starts with the project's scripts
# Every container of a torchyard image starts under it (PID 1: the deadline, the orphans; `inimage/start/warden.py`).
IMAGE_WARDEN = "/opt/torchyard/warden"

PLUGIN = "torchyard.inimage.plugin"
JUNIT = "junit.xml"
# A report larger than this is none torchyard wrote: the host reads none past it (stamp, compare, page)
MAX_REPORT_BYTES = 64 << 20
PARITY_JSON = "parity.json"
PARITY_MARKDOWN = "parity.md"
ENVIRONMENT_JSON = "env.json"
OPS_JSON = "ops.json"  # where a run swept operators (the ops suite)
OPS_MARKDOWN = "ops.md"
REPORT_FILES = (JUNIT, PARITY_JSON, PARITY_MARKDOWN, ENVIRONMENT_JSON, OPS_JSON, OPS_MARKDOWN)
# The test a run is in, while it runs (gone when it ends): where a native crash ends the process before any
# report is written, the host names that test.
RUNNING = "running.txt"

PROBE_FAILED = 3  # the exit status of a run that cannot test what its entry claims


OPS_SHARD_OPTION = "--torchyard-ops-shard"  # a run's option, not an entry's: `torchyard test --ops-shard K/N`
# The ops suite's expectations file, where a run names one: its bytes decide verdicts (the replay key reads it).
OPS_EXPECTATIONS_OPTION = "--torchyard-ops-expectations"
# A run's option too (`torchyard test --rerun-self-tests`): every harness self-test runs, proven or not.
RERUN_SELF_TESTS_OPTION = "--torchyard-rerun-self-tests"


def parse_shard(text: str) -> tuple[int, int]:
    """ "K/N" as (K, N), 1 <= K <= N: the K-th of N slices of the ops suite's operators."""
    index, slash, count = text.partition("/")
    if not (slash and index.isdigit() and count.isdigit() and 1 <= int(index) <= int(count)):
        raise ValueError(f"expected K/N with 1 <= K <= N (2/4: the second of four shards), got {text!r}")
    return int(index), int(count)


def cache_root(env: Mapping[str, str], report_dir: Path) -> Path:
    """The entry's cache (inductor's caches, artifacts/, results/): the container's named volume, or
    `.torchyard/cache/<entry>` for a venv and in place; else a folder in the reports, which every run empties."""
    return Path(env.get(INDUCTOR_CACHE) or report_dir / ".inductor-cache")


def marker_expression(suites: Sequence[str], *, project_tests: bool) -> str:
    """The pytest `-m` expression: the entry's suites, the harness self-tests, the project's own tests."""
    return " or ".join([*suites, HARNESS, *([PROJECT] if project_tests else [])])


def pytest_args(
    *,
    inimage_dir: str,
    report_dir: str,
    suites: Sequence[str],
    project_tests: Sequence[str] = (),
    extra: Sequence[str] = (),
) -> tuple[str, ...]:
    """The arguments after `python -m torchyard.inimage` (that is, pytest's), container and venv alike. A
    caller's own `-m` comes after torchyard's and so replaces it, as pytest's last `-m` does (the CLI says so:
    `gives_markers`); the entry's `tests-markers` selects among the project's own tests alone."""
    return (
        *(f"{inimage_dir}/{folder}" for folder in TEST_FOLDERS),
        *project_tests,
        "-p", PLUGIN,
        "-p", "no:cacheprovider",
        "-m", marker_expression(suites, project_tests=bool(project_tests)),
        f"--junitxml={report_dir}/{JUNIT}",
        *extra,
    )  # fmt: skip


def gives_markers(extra: Sequence[str]) -> bool:
    """Whether a caller's pytest arguments hold a `-m` of their own (`-m EXPR`, `-mEXPR`, `-m=EXPR`) before `--`."""
    for item in extra:
        if item == "--":
            return False
        if item.startswith("-m") and not item.startswith("--"):
            return True
    return False


def plugin_environment(*, project_tests: Sequence[str], extra: Sequence[str]) -> dict[str, str]:
    """torchyard's suites alone, with no pytest arguments of the caller's: pytest loads torchyard's plugin
    and pytest-xdist (for workers), not the third-party plugins the image happens to have through its
    dependencies (hypothesis's, anyio's, hydra's, via ExecuTorch: imports in every run, one of them at the
    very end). A project's own tests, or arguments that may name a plugin's options, keep pytest's plugin
    autoloading as it is."""
    return {} if project_tests or extra else {AUTOLOAD_OFF: "1"}


def suite_environment(
    fields: Mapping[str, object], options: RunOptions | None = None, *, report_dir: str
) -> dict[str, str]:
    """The variables the in-image plugin reads: each setting an entry field gives, from `fields` (plain values
    by field name) and the entry's `options`, and the reports' folder. A container gets them with `--env`, a
    venv in its env."""
    values = {**fields, **vars(options or RunOptions())}
    crossing = {row.variable: row.encode(values[row.field]) for row in SETTINGS if row.field is not None}
    return {REPORT_DIR: report_dir, **HASH_SEED, **crossing}


# What of the environment reaches the stack's numerics: variables torch, its backends and the math libraries
# read (a matrix.toml `--env` among them); caches' folders and torchyard's own settings aside.
STACK_VARIABLES = (
    "TORCH",
    "PYTORCH",
    "CUDA",
    "CUBLAS",
    "CUDNN",
    "NVIDIA",
    "HIP",
    "ROCM",
    "HSA",
    "MIOPEN",
    "ZE_",
    "SYCL",
    "ONEAPI",
    "OMP_",
    "MKL",
    "KMP_",
    "DNNL",
    "ONEDNN",
    "OPENBLAS",
    "TRITON",
    "INDUCTOR",
    "XNNPACK",
    "EXECUTORCH",
    "ATEN",
    "NCCL",
    "TENSORRT",
    "TRT_",
    "PYTHONHASHSEED",
)


def stack_environment(env: Mapping[str, str]) -> dict[str, str]:
    """The variables of `env` that can change what the stack computes (`STACK_VARIABLES`)."""
    return {
        name: value
        for name, value in sorted(env.items())
        if name.upper().startswith(STACK_VARIABLES)
        and not name.upper().startswith(OWN_PREFIXES)  # torchyard's: the key has the settings it needs
        and not name.upper().endswith("_DIR")  # where a cache lives (each xdist worker's inductor cache its own)
    }


# The in-image side and the stdlib-only modules it shares with the host (tests/unit/test_layout.py
# checks that the in-image side imports nothing else of torchyard).
INIMAGE_MODULES = (
    "__init__.py",
    "names.py",
    "contract.py",
    "opsfile.py",
    "cases.py",
    "util/__init__.py",
    "util/atomic.py",
    "util/markdown.py",
    "inimage",
)


# Packages built against one torch build (a C++ extension linked to it), and the local tags PyTorch's indexes give
# a build (`2.13.0+cpu`, `0.28.0+cu130`, `+rocm6.4`, `+xpu`). The lock (`lock.pairs`) and the image check
# (`inimage.checks.image`) read the same rule; a vendor's own tag (`2.6.0a0+ecf3bae40a.nv25.01`) says nothing
# comparable, and is not compared.
TORCH_COMPANIONS = ("torchvision", "torchaudio")
INDEX_BUILD = re.compile(r"cpu|cu(\d+)\d|rocm[\d.]+|xpu")


def build_family(tag: str) -> str | None:
    """What must match for two builds to load together: CPU, CUDA's major version (torchvision refuses only a
    different major; cu130 beside cu132 loads), ROCm, XPU; None for a tag that is not an index's."""
    match = INDEX_BUILD.fullmatch(tag)
    if match is None:
        return None
    return f"cu{match[1]}" if match[1] else re.sub(r"[\d.]+$", "", tag)
