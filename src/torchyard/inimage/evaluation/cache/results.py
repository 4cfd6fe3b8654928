"""Each passing result kept under the key of everything that decides it, so a run replays what did not change
and evaluates only what did, as Bazel caches test results.

The key (`ResultCache.key`): the case (its module's weights and buffers byte for byte, its code and its loss's
as the artifact key counts code, every input's values, its comparison and bounds), the backend and its bounds,
the run's precision and device, the stack (an image's base and lock, or a venv's distributions), the variables
of the environment the stack reads, the Python, torchyard's own code byte for byte, and the project's files
the case reaches (`project_code`: a module the walk reaches counts whole, with what it imports, so a helper
two imports away moves the key, and a change to one model moves that model's results only). A case that
cannot be keyed, or opts out (`Case(cache=False)`), is evaluated every run; so is every result that did not
pass, and every result of a case that declares a known failure for its backend: a failure is looked at again,
never replayed. `torchyard test --rerun` evaluates
everything and keeps nothing, as a run without the cache would (the harness's whole runs are such runs).
The cache lives with the entry's other caches, so it is scoped by trust as they are: an untrusted run reads
the trusted entries, and what it writes is thrown away with its scope.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
import hashlib
import json
import os
import platform
import types
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from torchyard import contract
from torchyard.inimage.cases import Case
from torchyard.inimage.evaluation.cache import project_code
from torchyard.inimage.evaluation.cache.digests import tensor_digest
from torchyard.inimage.evaluation.cache.keys import Unkeyable, code_reach, device_identity, versions, weight_digests
from torchyard.inimage.evaluation.cache.project_code import TORCHYARD
from torchyard.inimage.evaluation.cache.record import Record, quiet
from torchyard.inimage.evaluation.harness import Result
from torchyard.inimage.evaluation.metrics import Comparison
from torchyard.inimage.evaluation.trees import leaves
from torchyard.util.atomic import replace_atomically

# 7: the record holds the backend's run, links, modes and listings' sizes; 6: the noise rule holds training
# steps, a record holds what its code read at import; 5: the noise rule (comparisons carry eager's own error);
# 4: each verdict kept with the record of what its evaluation read; 3: the project's files each case reaches
FORMAT = 7


# torchyard's built-in corpus: its cases are keyed each by its own code (the case digest's code walk), as a
# project's are, so a change to one of them moves that case's keys only.
CORPUS = "inimage/cases/builtin.py"


@functools.cache
def harness_digest() -> str:
    """torchyard's own code, every file byte for byte but the built-in corpus's: a change to the harness reruns
    every result."""
    digest = hashlib.sha256()
    for path in sorted(TORCHYARD.rglob("*.py")):
        name = path.relative_to(TORCHYARD).as_posix()
        if name != CORPUS:
            digest.update(f"{name}\0".encode() + path.read_bytes() + b"\0")
    return digest.hexdigest()


@functools.cache
def _stack(identity: str) -> object:
    """The image's stack where a container has one, else every installed distribution and its version."""
    if identity:
        return identity
    from torchyard.inimage.start.replay import installed_distributions  # a venv's: read once, only where needed

    return installed_distributions()


SIMPLE = (int, float, complex, str, bytes, bool, type(None))


def _inputs_digest(case: Case) -> str:
    """Every input of every call, by value: tensors by their bytes, Python scalars by their repr, in the trees
    torchyard flattens outputs into (dataclasses and named tuples registered); any other leaf is `Unkeyable`,
    since a repr may leave values out (a tensor's shows its corners)."""
    digest = hashlib.sha256()
    for call in case.calls():
        for leaf in leaves((call.args, dict(call.kwargs))):
            if isinstance(leaf, torch.Tensor):
                digest.update(tensor_digest(leaf).encode() + b"\0")
            elif isinstance(leaf, SIMPLE):
                digest.update(f"{type(leaf).__name__}:{leaf!r}".encode() + b"\0")
            else:
                raise Unkeyable(f"an input of type {type(leaf).__qualname__} has no value the key can read")
    return digest.hexdigest()


# The project's loaded modules and those that patch a released one (`project_code`), as collection left them: a
# self-test that imports or patches a module of its own while the run goes on moves no key of the run's results.
COLLECTED: dict[str, list[str]] = {}


@quiet
def snapshot_project() -> None:
    """Take `project_code.shared` and `project_code.patches` once collection has imported the project, its
    tests and its cases."""
    COLLECTED["shared"] = project_code.shared()
    COLLECTED["patches"] = project_code.patches()


def _case_callables(case: Case) -> set[str]:
    """The modules of the functions that define the case (its factory, inputs, loss): keyed by the walk alone."""
    functions = [case.make_module, case.make_inputs, case.extra_batch, case.dynamic_shapes, case.loss]
    functions += [failure.computes for failure in case.known_failures.values()]
    found = set()
    for made in functions:
        function = made.func if isinstance(made, functools.partial) else made
        if isinstance(function, types.FunctionType) and function.__module__:
            found.add(function.__module__)
    return found


class ResultCache:
    """`<key>.json` files under `root`; `root=None` or `rerun`: nothing replayed, nothing kept."""

    def __init__(
        self, root: Path | None, *, rerun: bool = False, env: Mapping[str, str] = os.environ, audit_every: int = 0
    ) -> None:
        """`audit_every`: a kept verdict is evaluated again at that replay of it (`names.AUDIT_EVERY`, a trusted
        run's own cache: `evaluations.result_cache`); 0: never, and replays are not counted."""
        self.root = None if rerun else root
        self.audit_every = audit_every
        self._auditing: dict[str, tuple[Result, Record]] = {}  # the kept verdicts this run evaluates again
        self.stack = env.get(contract.STACK, "")
        self.environment = contract.stack_environment(env)
        self._cases: dict[str, str | None] = {}
        self._keyed: dict[str, set[str]] = {}  # per case: the project files its key holds (`Record.beyond`)
        self._models: dict[str, set[str]] = {}  # per case: the models its walk reached (`module:qualname`)
        self._shared: list[tuple[str, str]] | None = None

    def _case_digest(self, case: Case) -> str | None:
        """What the case is, once per case and process; None where it cannot be keyed or opts out."""
        if case.name not in self._cases:
            self._cases[case.name] = None
            if case.cache:
                try:
                    module = case.module()
                    also = (case.loss, case.make_inputs, case.extra_batch, case.dynamic_shapes)
                    code, reached, classes = code_reach(module, *also)
                    if "shared" not in COLLECTED:  # no plugin took it at collection: as the first key finds it
                        snapshot_project()
                    if self._shared is None:  # once a process
                        self._shared = project_code.shared_parts(COLLECTED["shared"])
                    by_walk = _case_callables(case)
                    files = project_code.closure(
                        reached, by_walk=by_walk, models=classes, universe=set(COLLECTED["shared"])
                    )
                    self._keyed[case.name] = {path for path, _ in files} | project_code.files_of(by_walk)
                    self._models[case.name] = set(classes)
                    document = {
                        "weights": weight_digests(module),
                        "code": code,
                        "project": files,
                        "patches": project_code.files(COLLECTED["patches"]),
                        "shared": self._shared,
                        "inputs": _inputs_digest(case),
                        "compare": case.compare,
                        "fullgraph": case.fullgraph,
                        "backends": case.backends,
                        "scaler": dict(case.scaler),  # a train backend's: one fp16 entry's steps
                        "labels": case.batch_labels(),
                    }
                    self._cases[case.name] = _digest(document)
                except Exception:  # `Unkeyable` (the artifact cache's note says why), or the case's own code
                    pass  # failing (its evaluation says how): either way the case runs uncached
        return self._cases[case.name]

    @quiet
    def key(self, case: Case, backend: str, device: torch.device, **decides: object) -> str | None:
        """The key of `case` on `backend` (`decides`: the bounds, dtypes and whatever else the caller's result
        depends on); None where there is no cache or the case has no key."""
        if self.root is None or case.known_failure(backend) is not None:
            return None
        case_digest = self._case_digest(case)
        if case_digest is None:
            return None
        document = {
            "format": FORMAT,
            "case": case.name,
            "case-digest": case_digest,
            "environment": self.environment,
            "backend": backend,
            "decides": decides,
            "device": device_identity(device),
            "versions": versions(),
            "stack": _stack(self.stack),
            "python": platform.python_version(),
            "torchyard": harness_digest(),
        }
        return _digest(document)

    @quiet
    def lookup(self, key: str | None) -> Result | None:
        """The kept result for `key`, marked with when it was evaluated; None on a miss (or a `--rerun`), and
        where anything its evaluation's record names (`record.Record`) is no longer as it was."""
        if key is None or self.root is None:
            return None
        try:
            data = json.loads((self.root / f"{key}.json").read_text())
            if Record.from_dict(data["record"]).changed():
                return None
            fields = dict(data["result"])
            fields["comparisons"] = [
                Comparison(**{name: _tupled(name, value) for name, value in comparison.items() if name != "passed"})
                for comparison in fields["comparisons"]
            ]
            result = Result(**fields)
            result.replayed = str(data["evaluated"])
            replays = int(data["replays"])
        except (OSError, ValueError, KeyError, TypeError):
            return None  # none, torn or from another format: evaluated again and kept anew
        if result.status != "passed":
            return None
        if self.audit_every and replays + 1 >= self.audit_every:  # its turn: evaluated again, then compared
            self._auditing[key] = (result, Record.from_dict(data["record"]))
            return None
        if self.audit_every:  # counted by trusted runs only
            self._write(key, {**data, "replays": replays + 1})
        return result

    @quiet
    def keep(self, key: str | None, result: Result, record: Record) -> None:
        """Keep a passing result under `key` with the record of what its evaluation read, beyond what the key
        holds; a failed write only loses the replay. A result whose record cannot be kept says why
        (`Result.unkeepable`)."""
        audited_now = key is not None and key in self._auditing
        if key is not None and audited_now:
            kept, kept_record = self._auditing.pop(key)
            result.audit = audited(kept, kept_record, result)
        if key is None or self.root is None or result.status != "passed" or result.replayed:
            return
        kept_record = record.beyond(self._keyed.get(result.case, set()), self._models.get(result.case, set()))
        if kept_record.unkeepable:
            result.unkeepable = kept_record.unkeepable
            return
        data = {
            "format": FORMAT,
            "evaluated": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "result": dataclasses.replace(result, diverges=None).as_dict(),
            "record": kept_record.as_dict(),
            # Where it starts in the audit's rotation: spread by key when first kept, so each run audits a share, not
            # a burst; from 0 after its audit, so each verdict is audited every `audit_every` replays.
            "replays": int(key[:8], 16) % self.audit_every if self.audit_every and not audited_now else 0,
        }
        self._write(key, data)

    def _write(self, key: str, data: Mapping[str, object]) -> None:
        """`<key>.json`, whole or not at all; a failed write only loses the replay."""
        assert self.root is not None
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            encoded = json.dumps(data, default=str, sort_keys=True).encode()
            replace_atomically(self.root / f"{key}.json", lambda stream: stream.write(encoded), durable=False)
        except OSError:
            pass


def audited(kept: Result, record: Record, now: Result) -> str:
    """How a kept verdict, evaluated again for the audit, compares: "same", or what differs and what the record
    named (none of which had changed, or the lookup would have missed): the record missed what decides it."""
    if now.status == kept.status:
        return "same"
    named = sorted([*record.files, *record.folders, *(f"${name}" for name in record.variables)])
    return (
        f"differs: kept as {kept.status} (evaluated {kept.replayed}), {now.status} when evaluated again; its record "
        f"named {', '.join(named) or 'nothing beyond its key'}, and none of that had changed: what changed is "
        "outside what the key and the record see"
    )


def _digest(document: object) -> str:
    return hashlib.sha256(json.dumps(document, sort_keys=True, default=str).encode()).hexdigest()


def _tupled(name: str, value: Any) -> Any:
    """A comparison's field as it was made: JSON gives its pairs (`Comparison.noise`, `held_to`) back as lists."""
    return tuple(value) if name in ("noise", "held_to") and isinstance(value, list) else value
