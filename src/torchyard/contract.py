"""The contract between the host and the in-image side: environment variables, paths, the pytest
command line and report file names. Stdlib only: the host builds runs from it, the image reads it.

Both the container path and the venv path call `pytest_args` and `suite_environment`, so a run is the
same run wherever it happens.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from torchyard.names import HARNESS, PROJECT

ACCELERATOR = "TORCHYARD_ACCELERATOR"
PRECISION = "TORCHYARD_PRECISION"
REPORT_DIR = "TORCHYARD_REPORT_DIR"
TOLERANCES = "TORCHYARD_TOLERANCES"  # JSON: {"float32.inductor": {"max-rel-l2": 1e-4}}
CASES = "TORCHYARD_CASES"  # comma-separated modules (or module:attr)
BUILTIN_CASES = "TORCHYARD_BUILTIN_CASES"  # "0" leaves the built-in corpus out
SUITES = "TORCHYARD_SUITES"  # comma-separated: the suites that must each pass at least one test
COMPILE_MODES = "TORCHYARD_COMPILE_MODES"  # comma-separated torch.compile modes, each a backend column
VENDOR_RECORD = "TORCHYARD_VENDOR_RECORD"
# Set (to the entry's lockfile path, or empty when it has none) for a run in an unlocked environment.
UNLOCKED = "TORCHYARD_UNLOCKED"
INDUCTOR_CACHE = "TORCHYARD_INDUCTOR_CACHE"  # the entry's cache root: inductor's caches and artifacts/
ARTIFACT_CACHE = "TORCHYARD_ARTIFACT_CACHE"  # "off": lower every program again
REUSE_RESULTS = "TORCHYARD_REUSE_RESULTS"  # "1": replay the last verdicts when nothing deciding them changed
IMAGE_ID = "TORCHYARD_IMAGE_ID"  # the image a container runs, for the replay fingerprint
TRUST = "TORCHYARD_TRUST"  # "trusted" or "untrusted": what the run's caches are scoped by (torchyard.trust)
AUTOLOAD_OFF = "PYTEST_DISABLE_PLUGIN_AUTOLOAD"  # pytest's own: no plugin loads unless named with -p

# Inside the image (the Dockerfile creates these; a unit test checks that it does).
IMAGE_REPORTS = "/reports"
IMAGE_CACHE = "/cache/inductor"
# inductor keeps its precompiled C++ headers in `<temp dir>/torchinductor_<user>/`, outside its cache
# folder and so on the run's private /tmp; the entry's volume is mounted there too (the user's name fixed
# by LOGNAME), so a warm container does not compile them again (4 s of every run on the CPU).
IMAGE_LOGNAME = "torchyard"
IMAGE_INDUCTOR_DEFAULT = f"/tmp/torchinductor_{IMAGE_LOGNAME}"
IMAGE_PROJECT = "/workspace"
IMAGE_HOME = "/home/torchyard"
IMAGE_SUITES = "/opt/torchyard/inimage/torchyard/inimage/suites"

PLUGIN = "torchyard.inimage.plugin"
JUNIT = "junit.xml"
PARITY_JSON = "parity.json"
PARITY_MARKDOWN = "parity.md"
ENVIRONMENT_JSON = "env.json"
REPORT_FILES = (JUNIT, PARITY_JSON, PARITY_MARKDOWN, ENVIRONMENT_JSON)

PROBE_FAILED = 3  # the exit status of a run that cannot test what its entry claims


def cache_root(env: Mapping[str, str], report_dir: Path) -> Path:
    """The entry's cache (inductor's caches, artifacts/, results/): the container's named volume, or
    `.torchyard/cache/<entry>` for a venv and in place; else a folder in the reports, which every run empties."""
    return Path(env.get(INDUCTOR_CACHE) or report_dir / ".inductor-cache")


def marker_expression(suites: Sequence[str], *, project_tests: bool) -> str:
    """The pytest `-m` expression: the entry's suites, the harness self-tests, the project's own tests."""
    return " or ".join([*suites, HARNESS, *([PROJECT] if project_tests else [])])


def pytest_args(
    *,
    suites_dir: str,
    report_dir: str,
    suites: Sequence[str],
    project_tests: Sequence[str] = (),
    extra: Sequence[str] = (),
) -> tuple[str, ...]:
    """The arguments after `python -m torchyard.inimage` (that is, pytest's), container and venv alike."""
    return (
        suites_dir,
        *project_tests,
        "-p", PLUGIN,
        "-p", "no:cacheprovider",
        "-m", marker_expression(suites, project_tests=bool(project_tests)),
        f"--junitxml={report_dir}/{JUNIT}",
        *extra,
    )  # fmt: skip


def plugin_environment(*, project_tests: Sequence[str], extra: Sequence[str]) -> dict[str, str]:
    """torchyard's suites alone, with no pytest arguments of the caller's: pytest loads torchyard's plugin
    and pytest-xdist (for workers), not the third-party plugins the image happens to have through its
    dependencies (hypothesis's, anyio's, hydra's, via ExecuTorch: about 2 s of imports every run, one of
    them at the very end). A project's own tests, or arguments that may name a plugin's options, keep
    pytest's plugin autoloading as it is."""
    return {} if project_tests or extra else {AUTOLOAD_OFF: "1"}


def suite_environment(
    *,
    accelerator: str,
    precision: str,
    report_dir: str,
    suites: Sequence[str],
    tolerances_json: str = "{}",
    cases: Sequence[str] = (),
    builtin_cases: bool = True,
    compile_modes: Sequence[str] = (),
) -> dict[str, str]:
    """The variables the in-image plugin reads; a container gets them with `--env`, a venv in its env."""
    return {
        ACCELERATOR: accelerator,
        PRECISION: precision,
        REPORT_DIR: report_dir,
        SUITES: ",".join(suites),
        TOLERANCES: tolerances_json,
        CASES: ",".join(cases),
        BUILTIN_CASES: "1" if builtin_cases else "0",
        COMPILE_MODES: ",".join(compile_modes),
    }


def split_list(env: Mapping[str, str], name: str) -> tuple[str, ...]:
    """A comma-separated variable as a tuple (empty when unset)."""
    return tuple(item for item in env.get(name, "").split(",") if item)
