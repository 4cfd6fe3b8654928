"""The harness's self-tests, proven once per stack: a run keeps the self-tests that passed under their key
(`<cache>/self-tests/`), and a later run with the same key leaves them out and says so in its reports;
`torchyard test --rerun-self-tests` runs them all. The key: the stack (an image's base and lock, or a venv's
installed distributions), torchyard's in-image side byte for byte, the Python, the device and its driver and
the xdist workers. Not the entry's settings: no self-test reads them (each sets its own, and whole runs drop
the run's), so two entries of one stack, cpu and cpu-bf16, share one proof; the few that check the run itself
(`pytest.mark.harness(this_run=True)`) run in every run and are never kept. Only torchyard's own self-tests are
kept; caches are scoped by trust, so an untrusted run never writes a proof a trusted run reads.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import importlib.metadata
import json
import os
import site
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from torchyard import contract
from torchyard.inimage import TEST_DIRS
from torchyard.inimage.start import replay
from torchyard.inimage.start.fork_server import selects_harness
from torchyard.inimage.start.settings import RUN_SETTINGS
from torchyard.names import HARNESS
from torchyard.util.atomic import write_atomically

FORMAT = 2  # 2: keyed by what the self-tests exercise, not the whole stack
STORE = contract.SELF_TESTS_STORE
KEPT = 16  # proofs kept per cache: one per stack and device a cache has seen lately
RERUN_OPTION = contract.RERUN_SELF_TESTS_OPTION
# Set by the entry point for its own run (and so its xdist workers): the proof file. Whole runs beside the run
# are started without it (`beside.whole_run_environment`), and so is a plain `pytest` with the plugin.
PROOF = contract.SELF_TEST_PROOF
SELF_TEST = "torchyard_self_test"  # the keyword a self-test's reports carry
THIS_RUN = "torchyard_this_run"  # and one that checks the run it is in
WORKER_COUNTS = "torchyard-self-tests-left-out"  # a worker's counts, in the output xdist hands its controller


def add_option(parser: pytest.Parser) -> None:
    parser.getgroup("torchyard").addoption(
        RERUN_OPTION, action="store_true", help="run every harness self-test, proven on this stack or not"
    )


def store_for(env: Mapping[str, str]) -> Path:
    report_dir = Path(contract.Values(env).text(contract.REPORT_DIR))
    return contract.cache_root(env, report_dir) / STORE


def _digest(document: object) -> str:
    return hashlib.sha256(json.dumps(document, sort_keys=True, default=str).encode()).hexdigest()[:32]


# The distributions the harness and its self-tests import: their versions, and those of what their metadata
# requires for this platform (transitively, no extra: a dev or docs extra names half the field), decide what the
# self-tests prove; with what torch imports where it is installed and that changes what it computes.
HARNESS_DISTRIBUTIONS = ("torch", "pytest", "pytest-xdist", "numpy", "sympy", "executorch", "torchao", "torch-tensorrt")
TORCH_OPTIONAL = ("opt-einsum", "triton", "optree")


# Entry points that load code into the self-tests' processes: pytest's plugins, the device backends `import
# torch` loads and calls (TORCH_DEVICE_BACKEND_AUTOLOAD), dynamo's backends.
ENTRY_POINT_GROUPS = ("pytest11", "torch.backends", "torch_dynamo_backends")
AT_START = ("sitecustomize.py", "usercustomize.py")


def _run_at_start(installed: Mapping[str, importlib.metadata.Distribution]) -> list[str]:
    """The distributions that ship what Python runs as it starts (a `.pth` file, `sitecustomize`): their
    versions, with the `.pth` files' content, key what those import."""
    found = []
    for name, distribution in installed.items():
        # RECORD's lines as text (`distribution.files` makes an object of each of torch's 15,000 files); an
        # egg-info installation's file lists where it has no RECORD
        record = distribution.read_text("RECORD")
        if record is not None:
            files: Iterable[str] = (line.partition(",")[0] for line in record.splitlines())
        else:
            files = (str(path) for path in distribution.files or ())
        if any("/" not in path and (path.endswith(".pth") or path in AT_START) for path in files):
            found.append(name)
    return found


def exercised() -> dict[str, object]:
    """What of the environment the self-tests exercise: the harness's distributions with what they require,
    transitively (`HARNESS_DISTRIBUTIONS`, `TORCH_OPTIONAL`), the distributions whose entry points load code into
    the run (`ENTRY_POINT_GROUPS`: a project's tests keep pytest's autoloading) or that ship what Python runs as it
    starts, each by version; every `.pth` file by content. Not what only the project's code imports: a project
    that adds a dependency keeps its proof."""
    installed: dict[str, importlib.metadata.Distribution] = {}
    for distribution in importlib.metadata.distributions():
        installed.setdefault(canonicalize_name(distribution.metadata["Name"] or ""), distribution)
    plugins = {canonicalize_name(point.dist.name) for group in ENTRY_POINT_GROUPS
               for point in importlib.metadata.entry_points(group=group) if point.dist is not None}  # fmt: skip
    todo = [*HARNESS_DISTRIBUTIONS, *TORCH_OPTIONAL, *plugins, *_run_at_start(installed)]
    versions: dict[str, str] = {}
    while todo:
        name = canonicalize_name(todo.pop())
        if name in versions or name not in installed:
            continue
        versions[name] = installed[name].version
        for line in installed[name].requires or ():
            try:
                requirement = Requirement(line)
                if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                    todo.append(requirement.name)
            except (InvalidRequirement, ValueError):  # a marker this packaging cannot read: followed neither
                continue
    folders = {Path(folder) for folder in [*site.getsitepackages(), site.getusersitepackages()]}
    started = {
        str(path): hashlib.sha256(path.read_bytes()).hexdigest()
        for folder in sorted(folders)
        if folder.is_dir()
        for path in sorted(folder.glob("*.pth"))
    }
    return {"versions": dict(sorted(versions.items())), "pth": started}


def _python_variables(env: Mapping[str, str]) -> dict[str, str]:
    """What changes how Python and pytest start (a path, a plugin, an option)."""
    return {name: value for name, value in sorted(env.items()) if name.startswith(("PYTHON", "PYTEST_"))}


def stack_key(env: Mapping[str, str]) -> str:
    """The part of the key that needs no torch: in an image, its base and first dependency layer (the first
    words of `contract.STACK`); the variables that reach the stack or how Python and pytest start; what of the
    environment the self-tests exercise (`exercised`); torchyard's in-image files (`replay.shipped`); the Python."""
    return _digest(
        {
            "format": FORMAT,
            # the base's digest and the first dependency group's key, which chains the build arguments (system
            # packages: the compiler inductor uses), the installer and torch's own group
            "base": env.get(contract.STACK, "").split(" ")[:2],
            "variables": contract.stack_environment(env) | _python_variables(env),
            "environment": exercised(),
            "torchyard": replay.shipped(),
            "python": sys.version,
        }
    )


def proof_path(env: Mapping[str, str], stack: str, device: Mapping[str, Any], argv: Sequence[str]) -> Path:
    """Where the proof of this stack (`stack_key`), device and xdist workers is kept (the worker arguments the
    run was given: a worker sees one device and runs a share of the tests)."""
    given = [arg for arg in argv if arg.startswith(("-n", "--numprocesses", "--dist"))]
    situation = _digest({"device": dict(device), "arguments": given})
    return store_for(env) / f"{stack}-{situation}.json"


def likely_proven(env: Mapping[str, str], stack: str, argv: Sequence[str]) -> bool:
    """Whether this run will probably leave every self-test out (its stack has a proof, on some device), from
    what needs no torch: the entry point then starts no fork server for them."""
    if RERUN_OPTION in argv:
        return False
    try:
        return any(store_for(env).glob(f"{stack}-*.json"))
    except OSError:
        return False


@dataclass(eq=False)  # a plugin: pluggy keeps its plugins in sets, by identity
class Proofs:
    """One run's proof: what an earlier run proved under its key, what this run left out for it, and what this
    run's self-tests did (the controller sees every report; xdist forwards the workers')."""

    path: Path
    proven: frozenset[str]
    when: str | None
    left_out: int = 0
    elsewhere: tuple[int, frozenset[str]] = (0, frozenset())  # self-tests of suites the run does not have
    passed: set[str] = field(default_factory=set)
    failed: set[str] = field(default_factory=set)
    checked: set[str] = field(default_factory=set)  # passes of self-tests that check the run itself: not kept

    @classmethod
    def load(cls, path: Path, *, rerun: bool) -> Proofs:
        """The proof at `path`; none where it is missing or unreadable, or every self-test is to run again."""
        try:
            record = json.loads(path.read_text())
            if not rerun and record.get("format") == FORMAT:
                return cls(path, frozenset(str(nodeid) for nodeid in record["passed"]), str(record["when"]))
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            pass
        return cls(path, frozenset(), None)

    @pytest.hookimpl(trylast=True)  # after pytest's own `-m` and `-k` deselection
    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        """Deselect the self-tests (`mark_self_tests`, which the plugin's hook calls first) this key has proven
        and those of suites this run does not have."""
        suites = config.stash[RUN_SETTINGS].suites
        kept, out, elsewhere = [], [], []
        for item in items:
            if SELF_TEST in item.keywords:
                if of_other_suites(item, suites):
                    elsewhere.append(item)
                    continue
                if of_this_run(item):
                    item.keywords[THIS_RUN] = 1
                elif item.nodeid in self.proven:
                    out.append(item)
                    continue
            kept.append(item)
        if out or elsewhere:
            config.hook.pytest_deselected(items=out + elsewhere)
            items[:] = kept
            self.left_out = len(out)
            self.elsewhere = (len(elsewhere), frozenset(name for item in elsewhere for name in harness_suites(item)))
        output = getattr(config, "workeroutput", None)  # an xdist worker's, sent to the controller as it ends
        if output is not None:
            output[WORKER_COUNTS] = [self.left_out, self.elsewhere[0], sorted(self.elsewhere[1])]

    @pytest.hookimpl(optionalhook=True)  # xdist's hook: called where the run has workers
    def pytest_testnodedown(self, node: Any, error: object) -> None:
        """What a worker left out: an xdist controller collects nothing, each worker collects the whole run."""
        counts = getattr(node, "workeroutput", {}).get(WORKER_COUNTS)
        if counts:
            left_out, elsewhere, suites = counts
            self.left_out = max(self.left_out, int(left_out))
            if int(elsewhere) > self.elsewhere[0]:
                self.elsewhere = (int(elsewhere), frozenset(str(name) for name in suites))

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """A self-test's outcome. Node IDs do not say where a test's file is (pytest names a file outside its
        rootdir relative to the argument that found it): the keyword set at collection does."""
        if SELF_TEST not in report.keywords:
            return
        if report.failed:
            self.failed.add(report.nodeid)
        elif report.passed and report.when == "call":
            (self.checked if THIS_RUN in report.keywords else self.passed).add(report.nodeid)

    def save(self, started: str) -> None:
        """The proof with this run's passes added (and its failures taken out), renamed into place; the oldest
        proofs past `KEPT` removed. Not kept is said in one line: the next run only runs its self-tests again."""
        passed = (self.proven | self.passed) - self.failed
        if not self.passed or passed == self.proven:
            return
        try:
            record = {"format": FORMAT, "when": started, "passed": sorted(passed)}
            write_atomically(self.path, json.dumps(record, indent=1))
            older = sorted(self.path.parent.glob("*.json"), key=lambda path: path.stat().st_mtime, reverse=True)
            for stale in older[KEPT:]:
                stale.unlink(missing_ok=True)
        except OSError as error:
            print(f"torchyard: the self-tests' proof was not kept: {error}", file=sys.stderr)

    def summary(self) -> dict[str, Any]:
        """What parity.json says of the self-tests (parity.md says it in a line); under xdist, as the workers
        told the controller."""
        ran = self.passed | self.failed | self.checked
        return {
            "ran": len(ran),
            "failed": len(self.failed),
            "failed-tests": sorted(nodeid.rpartition("inimage/")[2] for nodeid in self.failed),
            "left-out": self.left_out,
            "other-suites": {"left-out": self.elsewhere[0], "suites": sorted(self.elsewhere[1])},
            "proven-by": self.when if self.left_out else None,
            "key": self.path.stem,
        }


_TESTS = tuple(folder.resolve() for folder in TEST_DIRS)


def _in_suites(path: Path) -> bool:
    return any(folder in path.resolve().parents for folder in _TESTS)


def of_other_suites(item: pytest.Item, suites: tuple[str, ...]) -> bool:
    """A self-test of one suite's own machinery (`pytest.mark.harness("ops")`: the suites named) in a run that
    has none of those suites: what it proves, no test of the run uses. The others prove what every run uses;
    a run that names no suites leaves none out."""
    named = harness_suites(item)
    return bool(suites and named and not set(named) & set(suites))


def harness_suites(item: pytest.Item) -> tuple[str, ...]:
    """The suites the nearest `harness(...)` mark that names any names: a test's own
    `harness(this_run=True)` keeps its module's suites."""
    return next((tuple(mark.args) for mark in item.iter_markers(HARNESS) if mark.args), ())


def of_this_run(item: pytest.Item) -> bool:
    """A self-test that checks the run it is in (what it selected, what it wrote): proven by no other run."""
    return any(mark.kwargs.get("this_run") for mark in item.iter_markers(HARNESS))


def mark_self_tests(items: list[pytest.Item]) -> None:
    """Mark each of torchyard's self-tests by keyword, which every report carries (an xdist worker's to the
    controller too)."""
    for item in items:
        if item.get_closest_marker(HARNESS) is not None and _in_suites(Path(str(item.path))):
            item.keywords[SELF_TEST] = 1


PROOFS = pytest.StashKey[Proofs]()


def register(config: pytest.Config) -> None:
    """In the entry point's run (its `PROOF`), this run's proofs, as a plugin."""
    path = os.environ.get(PROOF)
    if path:
        config.stash[PROOFS] = proofs = Proofs.load(Path(path), rerun=config.getoption(RERUN_OPTION))
        config.pluginmanager.register(proofs, "torchyard-proofs")
        expression = config.getoption("markexpr", "")
        selected = not expression or selects_harness(expression)  # a user's -m may leave them all out
        if selected and not Path(path).is_file() and not hasattr(config, "workerinput"):  # said once
            print(
                "torchyard: first run on this stack and device: the harness's self-tests run beside the suites "
                "(they prove torchyard's own comparisons; later runs on this stack leave them out)",
                flush=True,
            )


def has_proof(config: pytest.Config) -> bool:
    """Whether this run has a proof to leave self-tests out by (asked at configuration, before collection)."""
    path = os.environ.get(PROOF)
    return bool(path) and not config.getoption(RERUN_OPTION) and Path(str(path)).is_file()


def now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
