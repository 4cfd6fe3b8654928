"""What a change changed: a run's results held to a baseline run's (the default branch's last trusted run, or
one named), case by case and backend by backend, on every quantity both measured. Pure: two runs' results in,
the changes out, as data (`parity.json`'s `changes`) and as Markdown (the top of parity.md, the step summary).
Both runs' text comes from runs of other people's code: it is shown as data, never as Markdown of its own."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from torchyard.names import CHANGE_KINDS, ChangeKind
from torchyard.reports.merge import OUTCOMES, Run

# The bounds a comparison's errors are held to, by the metric's name in parity.json (cosine is judged apart).
ERROR_BOUNDS = {"scaled_max_error": "max_scaled_error", "rel_l2_error": "max_rel_l2"}
GREW = 10.0  # an error this many times the baseline's is a change, where it also counts against its bound
NOTICED = 0.01  # below this share of its bound an error is rounding: ten times nothing is still nothing
HALF = 0.5  # an error that now uses more than half its bound, where it used less
PROGRAM_GREW = 1.1  # a program file this much larger (and by PROGRAM_BYTES at least)
PROGRAM_BYTES = 4096
SLOWER = 2.0  # lowering or compiling this many times slower (and by SLOWER_SECONDS at least)
SLOWER_SECONDS = 1.0
LATENCY_SLOWER = 1.5  # a median latency this many times the baseline's, both measured on a quiet machine
SHOWN = 3  # reasons, operators or outputs named in a change's line (the rest counted)
LEFT_TO = ("portable kernels", "PyTorch")  # where a delegate's accounting says it left nodes (ExecuTorch, TensorRT)


@dataclass(frozen=True)
class Change:
    case: str
    backend: str
    kind: ChangeKind
    before: Any
    after: Any
    said: str  # in words, for the reader

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Changes:
    """What changed against `baseline` (a line naming it), the pairs that did not, what only one run has, and
    how the two runs' stacks differ (where they do, what could be compared still was)."""

    baseline: str
    changes: tuple[Change, ...]
    unchanged: int
    added: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    stacks: tuple[str, ...] = ()
    narrowed: str = ""  # the pytest arguments a narrowed run was given: what it left out is not a change
    left_out: int = 0  # the baseline's pairs such a run did not run

    def of(self, kinds: Iterable[str]) -> list[Change]:
        """The changes of these kinds (an entry's `fail-on-change`)."""
        wanted = set(kinds)
        return [change for change in self.changes if change.kind in wanted]

    def as_dict(self) -> dict[str, Any]:
        return {
            "baseline": self.baseline,
            "changes": [change.as_dict() for change in self.changes],
            "unchanged": self.unchanged,
            "added": list(self.added),
            "removed": list(self.removed),
            "stacks": list(self.stacks),
            "narrowed": self.narrowed,
            "left_out": self.left_out,
        }

    def markdown(self, failing: Sequence[str] = ()) -> str:
        """The comparison as parity.md opens with it: a line per change (`failing` kinds marked as failing the
        run), unchanged pairs as one count. What a run wrote (names, reasons, versions) is in code spans, one
        line each: it renders as nothing but text."""
        lines = [f"### What changed against {self.baseline}", ""]
        if self.stacks:
            differ = "; ".join(_code(item) for item in self.stacks)
            lines += [f"The stacks differ ({differ}): what both measured is compared still.", ""]
        for change in self.changes:
            fails = " **(fails this run: `fail-on-change`)**" if change.kind in failing else ""
            where = f"{_code(change.case)} on {_code(change.backend)}"
            lines.append(f"- {where}, {change.kind}: {_code(change.said, SAID_LENGTH)}{fails}")
        if self.added:
            lines.append(f"- new in this run: {_named(self.added)}")
        if self.removed:
            lines.append(f"- in the baseline only: {_named(self.removed)}")
        if self.left_out:
            noun = "case and backend" if self.left_out == 1 else "cases and backends"
            lines.append(
                f"- {self.left_out} {noun} of the baseline not run by this narrowed run ({_code(self.narrowed)}): "
                "not compared"
            )
        noun = "case and backend" if self.unchanged == 1 else "cases and backends"
        lines.append(f"- {self.unchanged} {noun} unchanged" + ("" if self.changes else "; nothing changed"))
        return "\n".join(lines) + "\n"


NAME_LENGTH = 200  # a name a run wrote, as shown: cut, and kept to one line
SAID_LENGTH = 600  # a change's words, which quote a run's reason


def plain(text: str, length: int = NAME_LENGTH) -> str:
    """Text a run wrote (a case's or a backend's name, a reason), as one line of printable characters that cannot
    close a code span or a table cell, cut to `length`."""
    flat = " ".join(str(text).split())
    return "".join(char if char.isprintable() and char not in "`|" else "?" for char in flat[:length])


def _code(text: str, length: int = NAME_LENGTH) -> str:
    """In a code span: no link, heading or markup renders from it."""
    return f"`{plain(text, length)}`"


def _named(names: Sequence[str]) -> str:
    shown = ", ".join(_code(name) for name in names[:SHOWN])
    return shown + (f" and {len(names) - SHOWN} more" if len(names) > SHOWN else "")


def number(value: object) -> float | None:
    """A number a run wrote, where it is one (a bool is not); NaN stays NaN, an integer past a float's range is
    infinite."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return None
    try:
        return float(value)
    except OverflowError:
        return math.inf


def _count(value: object) -> int:
    found = number(value)
    return int(found) if found is not None and math.isfinite(found) else 0


@dataclass
class _Pair:
    """A case on a backend in one run: its results across suites (one evaluation, several verdicts)."""

    results: list[dict[str, Any]] = field(default_factory=list)

    @property
    def outcome(self) -> str:
        found = [str(result.get("outcome", "")) for result in self.results]
        return next((outcome for outcome in OUTCOMES if outcome in found), plain(found[0]) if found else "none")

    def first(self, name: str) -> Any:
        """The first of its results' values of `name` (the suites read one evaluation)."""
        return next((result[name] for result in self.results if result.get(name) is not None), None)

    def texts(self, name: str) -> list[str]:
        """A list of text its first result with one has (graph breaks' reasons)."""
        return _texts(self.first(name))

    @property
    def reason(self) -> str:
        return next((str(r.get("reason", "")) for r in self.results if r.get("outcome") == self.outcome), "")


def _pairs(results: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str], _Pair]:
    pairs: dict[tuple[str, str], _Pair] = {}
    for result in results:
        key = (str(result.get("case", "")), str(result.get("backend", "")))
        pairs.setdefault(key, _Pair()).results.append(dict(result))
    return pairs


def compare(current: Run, baseline: Run, *, quiet: bool = False, narrowed: str = "") -> Changes:
    """Every pair both runs have, held to the baseline's: outcomes, errors against their bounds, graph breaks,
    delegation, program size, lowering time; latency only where both were measured on a quiet machine (`quiet`,
    as the speed table decides). A pair the baseline has and this run does not is an outcome change (not run),
    unless the run was `narrowed` (given pytest arguments: `-k`, a test's id, `-x`): then what it left out is
    counted in one line, never a change."""
    now, before = _pairs(current.results), _pairs(baseline.results)
    changes: list[Change] = []
    unchanged = 0
    # Times are compared on one machine only: a pull request's hosted runner and the default branch's may differ.
    alike = all(baseline.environment.get(name) == current.environment.get(name) for name in ("device", "accelerator"))
    for key in sorted(now.keys() & before.keys()):
        found = list(_changes(key, before[key], now[key], quiet=quiet, timed=alike))
        changes += found
        unchanged += not found
    missing = sorted(before.keys() - now.keys())
    for case, backend in () if narrowed else missing:
        was = before[case, backend].outcome
        changes.append(Change(case, backend, "outcome", was, "not run", f"{was} → not run: this run has no result"))
    stacks = list(_stack_differences(baseline.environment, current.environment))
    if baseline.precision != current.precision:
        stacks.insert(0, f"precision {plain(baseline.precision)} → {plain(current.precision)}")
    return Changes(
        baseline=_describe(baseline),
        changes=tuple(changes),
        unchanged=unchanged,
        added=tuple(f"{case} on {backend}" for case, backend in sorted(now.keys() - before.keys())),
        removed=() if narrowed else tuple(f"{case} on {backend}" for case, backend in missing),
        stacks=tuple(stacks),
        narrowed=narrowed,
        left_out=len(missing) if narrowed else 0,
    )


def _describe(run: Run) -> str:
    entry = plain(str(run.environment.get("entry", run.name)))
    trust = plain(str(run.environment.get("trust", "")))
    when = f", finished {plain(run.finished_utc)}" if run.finished else ""
    return f"the {trust + ' ' if trust else ''}run of `{entry}`{when}"


# What tells two runs' stacks apart: the versions, the device, and the host's key of the image's dependency
# layers (`stack`: base, lock, installer). Not the image's tag, which the project's own code moves too.
STACK_FACTS = ("torch", "stack", "accelerator", "device")
NOT_STACK = ("trust", "entry", "finished", "load", "packages", "python_packages", "precision", "image")


def _stack_differences(before: Mapping[str, Any], now: Mapping[str, Any]) -> Iterable[str]:
    for name in (*STACK_FACTS, *sorted(set(before) & set(now) - set(STACK_FACTS))):
        if name in NOT_STACK or name.startswith("_"):
            continue
        old, new = before.get(name), now.get(name)
        if isinstance(old, (str, int, float)) and isinstance(new, (str, int, float)) and old != new:
            yield f"{plain(name)} {plain(str(old))} → {plain(str(new))}"


def _changes(key: tuple[str, str], before: _Pair, now: _Pair, *, quiet: bool, timed: bool) -> Iterable[Change]:
    case, backend = key
    if now.outcome != before.outcome:
        said = f"{before.outcome} → {now.outcome}" + (f": {now.reason}" if now.reason else "")
        yield Change(case, backend, "outcome", before.outcome, now.outcome, said)
    yield from _errors(case, backend, before, now)
    old_breaks, new_breaks = _count(before.first("graph_breaks")), _count(now.first("graph_breaks"))
    if _both(before, now, "graph_breaks") and new_breaks > old_breaks:
        reasons = now.texts("graph_break_reasons")
        why = f" ({'; '.join(reasons[:SHOWN])})" if reasons else ""
        yield Change(
            case, backend, "graph-breaks", old_breaks, new_breaks, f"graph breaks {old_breaks} → {new_breaks}{why}"
        )
    old_again, new_again = _count(before.first("recompiles")), _count(now.first("recompiles"))
    if _both(before, now, "recompiles") and new_again > old_again:
        guards = now.texts("recompile_reasons")
        more = f" and {len(guards) - SHOWN} more" if len(guards) > SHOWN else ""
        why = f" ({'; '.join(guards[:SHOWN])}{more})" if guards else ""
        said = f"recompilations {old_again} → {new_again}{why}"
        yield Change(case, backend, "recompilations", old_again, new_again, said)
    yield from _delegation(case, backend, before, now)
    old_bytes, new_bytes = _count(before.first("artifact_bytes")), _count(now.first("artifact_bytes"))
    if old_bytes > 0 and new_bytes >= old_bytes * PROGRAM_GREW and new_bytes - old_bytes >= PROGRAM_BYTES:
        said = f"program {old_bytes:,} → {new_bytes:,} bytes"
        yield Change(case, backend, "program-size", old_bytes, new_bytes, said)
    if timed:
        yield from _slower(case, backend, before, now, quiet=quiet)


def _errors(case: str, backend: str, before: _Pair, now: _Pair) -> Iterable[Change]:
    """The output whose error grew the most: tenfold (its value, whatever the bounds did) and at least NOTICED of
    its bound now, or past half its bound where the baseline's value was under half of it; an error no longer
    finite where it was. Where both runs compared the same outputs."""
    old, new = _errors_of(before), _errors_of(now)
    worst: tuple[float, Change] | None = None
    for key, (value, bound) in new.items():
        if key not in old:
            continue
        was, was_bound = old[key]
        output, metric = key
        # Both against this run's bound, and noticed against the tighter of the two: a looser bound hides nothing.
        share, previous = value / bound, was / bound
        if not math.isfinite(value) and math.isfinite(was):
            said = f"{output}: {metric} is no longer finite ({was:.3g} → {value})"
            grown = math.inf
        elif (
            math.isfinite(value)
            and value >= NOTICED * min(bound, was_bound)
            and (value >= GREW * was or share > HALF >= previous)
        ):
            why = "tenfold or more" if value >= GREW * was else "past half its bound"
            bounds = f"; its bound {was_bound:.3g} → {bound:.3g}" if was_bound != bound else ""
            said = (
                f"{output}: {metric} {why}, {was:.3g} → {value:.3g} ({previous:.2%} → {share:.2%} of its bound){bounds}"
            )
            grown = value / max(was, 1e-300)
        else:
            continue
        if worst is None or grown > worst[0]:
            worst = (
                grown,
                Change(case, backend, "error", round(was, 12), value if math.isfinite(value) else str(value), said),
            )
    if worst is not None:
        yield worst[1]


def _errors_of(pair: _Pair) -> dict[tuple[str, str], tuple[float, float]]:
    """Each output's largest error by metric, with the bound it was held to (the noise rule's `held_to`, else the
    result's `bounds`); NaN is an error larger than any."""
    errors: dict[tuple[str, str], tuple[float, float]] = {}
    for result in pair.results:
        found, comparisons = result.get("bounds"), result.get("comparisons")
        bounds: dict[str, Any] = found if isinstance(found, dict) else {}
        for comparison in comparisons if isinstance(comparisons, list) else []:
            if not isinstance(comparison, dict):
                continue
            batch = f" {plain(str(comparison['batch']))}" if comparison.get("batch") else ""
            held = comparison.get("held_to")  # the noise rule's bounds, tighter than the table's, where it held it
            for index, (metric, bound_name) in enumerate(ERROR_BOUNDS.items()):
                value, bound = number(comparison.get(metric)), number(bounds.get(bound_name))
                if isinstance(held, list) and len(held) == len(ERROR_BOUNDS):
                    bound = number(held[index])
                if value is None or bound is None or not bound > 0 or not math.isfinite(bound):
                    continue
                value = math.inf if math.isnan(value) else value
                key = (f"{plain(str(comparison.get('output', '')))}{batch}", metric)
                errors[key] = max(errors.get(key, (value, bound)), (value, bound))
    return errors


def _delegation(case: str, backend: str, before: _Pair, now: _Pair) -> Iterable[Change]:
    """A delegate that took less: more subgraphs (a split; Torch-TensorRT's engines), more nodes left outside it
    (to portable kernels, or to PyTorch), operators newly left out (named). Before and after as its counts."""
    was, then = before.first("delegation"), now.first("delegation")
    if not isinstance(was, dict) or not isinstance(then, dict):
        return
    counts = {
        name: (_count(was.get(name)), _count(then.get(name)))
        for name in ("subgraphs", "delegated-nodes", "non-delegated-nodes")
    }
    said = []
    if counts["subgraphs"][1] > counts["subgraphs"][0]:
        said.append(f"delegated subgraphs {counts['subgraphs'][0]} → {counts['subgraphs'][1]}")
    if counts["non-delegated-nodes"][1] > counts["non-delegated-nodes"][0]:
        where = then.get("left-to") if then.get("left-to") in LEFT_TO else "portable kernels"
        said.append(f"nodes left to {where} {counts['non-delegated-nodes'][0]} → {counts['non-delegated-nodes'][1]}")
    left_before = set(_texts(was.get("left-out")))
    left = sorted(set(_texts(then.get("left-out"))) - left_before)
    if left:
        more = f" and {len(left) - SHOWN} more" if len(left) > SHOWN else ""
        said.append(f"newly left out: {', '.join(left[:SHOWN])}{more}")
    if said:
        before_counts = {name: pair[0] for name, pair in counts.items()}
        after_counts = {name: pair[1] for name, pair in counts.items()}
        yield Change(case, backend, "delegation", before_counts, after_counts, "; ".join(said))


def _both(before: _Pair, now: _Pair, name: str) -> bool:
    """Whether both runs measured `name` for the pair (a baseline from before a signal existed measured none)."""
    return before.first(name) is not None and now.first(name) is not None


def _texts(value: object) -> list[str]:
    """The text items of a list a run wrote, each as one plain line."""
    return [plain(item) for item in value if isinstance(item, str)] if isinstance(value, list) else []


def _slower(case: str, backend: str, before: _Pair, now: _Pair, *, quiet: bool) -> Iterable[Change]:
    """Lowering or compiling that took longer, where both runs did it (neither replayed) the same way (the
    artifact cache hit in both or in neither, each the process's first lowering on the backend or each not: the
    first pays the stack's warm-up); latency only on a quiet machine, where both were measured."""
    evaluated = not before.first("replayed") and not now.first("replayed")
    old, new = number(before.first("compile_seconds")), number(now.first("compile_seconds"))
    first = before.first("first_lowering"), now.first("first_lowering")
    same_way = str(before.first("cache") or "") == str(now.first("cache") or "")
    same_way = same_way and isinstance(first[0], bool) and first[0] == first[1]
    if (
        evaluated and same_way and old is not None and new is not None and old > 0
        and new >= SLOWER * old and new - old >= SLOWER_SECONDS and math.isfinite(new)
    ):  # fmt: skip
        said = f"lowering {old:.1f} s → {new:.1f} s"
        yield Change(case, backend, "lowering-time", round(old, 3), round(new, 3), said)
    old, new = number(before.first("latency_ms")), number(now.first("latency_ms"))
    if quiet and old is not None and new is not None and old > 0 and new >= LATENCY_SLOWER * old and math.isfinite(new):
        said = f"median latency {old:.2f} ms → {new:.2f} ms"
        yield Change(case, backend, "latency", round(old, 3), round(new, 3), said)


__all__ = ["CHANGE_KINDS", "Change", "Changes", "compare", "number", "plain"]
