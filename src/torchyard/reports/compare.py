"""What a change changed: a run's results held to a baseline run's (the default branch's last trusted run, or
one named), case by case and backend by backend, on every quantity both measured. Pure: two runs' results in,
the changes out, as data (`parity.json`'s `changes`) and as Markdown (the top of parity.md, the step summary).
Both runs' text comes from runs of other people's code: it is shown as data, never as Markdown of its own."""

from __future__ import annotations

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
        }

    def markdown(self, failing: Sequence[str] = ()) -> str:
        """The comparison as parity.md opens with it: a line per change (`failing` kinds marked as failing the
        run), unchanged pairs as one count."""
        lines = [f"### What changed against {self.baseline}", ""]
        if self.stacks:
            lines += [f"The stacks differ ({'; '.join(self.stacks)}): what both measured is compared still.", ""]
        for change in self.changes:
            fails = " **(fails this run: `fail-on-change`)**" if change.kind in failing else ""
            lines.append(
                f"- `{_code(change.case)}` on {_code(change.backend)}, {change.kind}: {_text(change.said)}{fails}"
            )
        if self.added:
            lines.append(f"- new in this run: {_named(self.added)}")
        if self.removed:
            lines.append(f"- in the baseline only: {_named(self.removed)}")
        noun = "case and backend" if self.unchanged == 1 else "cases and backends"
        lines.append(f"- {self.unchanged} {noun} unchanged" + ("" if self.changes else "; nothing changed"))
        return "\n".join(lines) + "\n"


NAME_LENGTH = 200  # a case's or a backend's name as shown: a run wrote it, so it is cut, and kept to one line


def plain(text: str) -> str:
    """A name a run wrote (a case's, a backend's), as one line of printable characters that cannot close a code
    span or a table cell, cut to NAME_LENGTH."""
    return "".join(char if char.isprintable() and char not in "`|" else "?" for char in text[:NAME_LENGTH])


def _code(text: str) -> str:
    return plain(text)


def _text(text: str) -> str:
    """A change's words as plain text in Markdown: what a run wrote cannot become a link, a heading or markup."""
    return "".join(f"\\{char}" if char in "\\`*_[]<>#|!" else char for char in " ".join(text.split()))


def _named(names: Sequence[str]) -> str:
    shown = ", ".join(f"`{_code(name)}`" for name in names[:SHOWN])
    return shown + (f" and {len(names) - SHOWN} more" if len(names) > SHOWN else "")


@dataclass
class _Pair:
    """A case on a backend in one run: its results across suites (one evaluation, several verdicts)."""

    results: list[dict[str, Any]] = field(default_factory=list)

    @property
    def outcome(self) -> str:
        found = {str(result.get("outcome", "")) for result in self.results}
        return next((outcome for outcome in OUTCOMES if outcome in found), "none")

    def first(self, name: str) -> Any:
        """The first of its results' values of `name` (the suites read one evaluation)."""
        return next((result[name] for result in self.results if result.get(name) is not None), None)

    @property
    def reason(self) -> str:
        return next((str(r.get("reason", "")) for r in self.results if r.get("outcome") == self.outcome), "")


def _pairs(results: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str], _Pair]:
    pairs: dict[tuple[str, str], _Pair] = {}
    for result in results:
        pairs.setdefault((str(result.get("case", "")), str(result.get("backend", ""))), _Pair()).results.append(
            dict(result)
        )
    return pairs


def compare(current: Run, baseline: Run, *, quiet: bool = False) -> Changes:
    """Every pair both runs have, held to the baseline's: outcomes, errors against their bounds, graph breaks,
    delegation, program size, lowering time; latency only where both were measured on a quiet machine (`quiet`,
    as the speed table decides)."""
    now, before = _pairs(current.results), _pairs(baseline.results)
    changes: list[Change] = []
    unchanged = 0
    for key in sorted(now.keys() & before.keys()):
        found = list(_changes(key, before[key], now[key], quiet=quiet))
        changes += found
        unchanged += not found
    return Changes(
        baseline=_describe(baseline),
        changes=tuple(changes),
        unchanged=unchanged,
        added=tuple(f"{case} on {backend}" for case, backend in sorted(now.keys() - before.keys())),
        removed=tuple(f"{case} on {backend}" for case, backend in sorted(before.keys() - now.keys())),
        stacks=tuple(_stack_differences(baseline.environment, current.environment)),
    )


def _describe(run: Run) -> str:
    entry = str(run.environment.get("entry", run.name))
    trust = str(run.environment.get("trust", ""))
    when = f", finished {run.finished.replace('T', ' ').replace('+00:00', ' UTC')}" if run.finished else ""
    return f"the {trust + ' ' if trust else ''}run of `{_code(entry)}`{when}".replace("  ", " ")


STACK_FACTS = ("torch", "image", "accelerator", "device", "precision")


def _stack_differences(before: Mapping[str, Any], now: Mapping[str, Any]) -> Iterable[str]:
    for name in (*STACK_FACTS, *sorted(set(before) & set(now) - set(STACK_FACTS))):
        if name in ("trust", "entry", "finished", "load", "packages", "python_packages") or name.startswith("_"):
            continue
        old, new = before.get(name), now.get(name)
        if isinstance(old, (str, int, float)) and isinstance(new, (str, int, float)) and old != new:
            yield f"{name} {old} → {new}"


def _changes(key: tuple[str, str], before: _Pair, now: _Pair, *, quiet: bool) -> Iterable[Change]:
    case, backend = key
    if now.outcome != before.outcome:
        said = f"{before.outcome} → {now.outcome}" + (f": {now.reason}" if now.reason else "")
        yield Change(case, backend, "outcome", before.outcome, now.outcome, said)
    yield from _errors(case, backend, before, now)
    old_breaks, new_breaks = before.first("graph_breaks"), now.first("graph_breaks")
    if isinstance(new_breaks, int) and new_breaks > (old_breaks if isinstance(old_breaks, int) else 0):
        reasons = [str(reason) for reason in now.first("graph_break_reasons") or []]
        why = f" ({'; '.join(reasons[:SHOWN])})" if reasons else ""
        said = f"graph breaks {old_breaks if old_breaks is not None else 0} → {new_breaks}{why}"
        yield Change(case, backend, "graph-breaks", old_breaks, new_breaks, said)
    yield from _delegation(case, backend, before.first("delegation"), now.first("delegation"))
    old_bytes, new_bytes = before.first("artifact_bytes"), now.first("artifact_bytes")
    if (
        isinstance(old_bytes, int) and isinstance(new_bytes, int) and old_bytes > 0
        and new_bytes >= old_bytes * PROGRAM_GREW and new_bytes - old_bytes >= PROGRAM_BYTES
    ):  # fmt: skip
        yield Change(
            case, backend, "program-size", old_bytes, new_bytes, f"program {old_bytes:,} → {new_bytes:,} bytes"
        )
    yield from _slower(case, backend, before, now, quiet=quiet)


def _errors(case: str, backend: str, before: _Pair, now: _Pair) -> Iterable[Change]:
    """The output whose error grew the most against its bound: tenfold (and noticeable against the bound), or
    past half its bound where it was under half. Where both runs compared the same outputs."""
    old = _worst_shares(before)
    worst: tuple[float, str, float, float, str] | None = None
    for (output, metric), share in _worst_shares(now).items():
        previous = old.get((output, metric))
        if previous is None or share < NOTICED:
            continue
        grew = share >= GREW * previous if previous > 0 else share >= NOTICED
        crossed = share > HALF >= previous
        if (grew or crossed) and (worst is None or share / max(previous, 1e-300) > worst[0]):
            why = "tenfold or more" if grew else "past half its bound"
            worst = (share / max(previous, 1e-300), output, previous, share, f"{metric} {why}")
    if worst is not None:
        _, output, previous, share, what = worst
        said = f"{output}: {what}, {previous:.2%} → {share:.2%} of its bound"
        yield Change(case, backend, "error", round(previous, 6), round(share, 6), said)


def _worst_shares(pair: _Pair) -> dict[tuple[str, str], float]:
    """Each output's errors as shares of their bounds (the result's `bounds`), by output and metric."""
    shares: dict[tuple[str, str], float] = {}
    for result in pair.results:
        found = result.get("bounds")
        bounds: dict[str, Any] = found if isinstance(found, dict) else {}
        for comparison in result.get("comparisons") or []:
            if not isinstance(comparison, dict):
                continue
            batch = f" {comparison['batch']}" if comparison.get("batch") else ""
            for metric, bound_name in ERROR_BOUNDS.items():
                value, bound = comparison.get(metric), bounds.get(bound_name)
                if isinstance(value, (int, float)) and isinstance(bound, (int, float)) and bound > 0:
                    key = (f"{comparison.get('output', '')}{batch}", metric)
                    shares[key] = max(shares.get(key, 0.0), float(value) / float(bound))
    return shares


def _delegation(case: str, backend: str, before: Any, now: Any) -> Iterable[Change]:
    """A delegate that took less: more subgraphs (a split), more nodes left to portable kernels, operators newly
    left out (named)."""
    if not isinstance(before, dict) or not isinstance(now, dict):
        return
    said = []
    if int(now.get("subgraphs", 0)) > int(before.get("subgraphs", 0)):
        said.append(f"delegated subgraphs {before.get('subgraphs')} → {now.get('subgraphs')}")
    if int(now.get("non-delegated-nodes", 0)) > int(before.get("non-delegated-nodes", 0)):
        said.append(
            f"nodes left to portable kernels {before.get('non-delegated-nodes')} → {now.get('non-delegated-nodes')}"
        )
    left = sorted(set(now.get("left-out") or []) - set(before.get("left-out") or []))
    if left:
        said.append(
            f"newly left out: {', '.join(left[:SHOWN])}"
            + (f" and {len(left) - SHOWN} more" if len(left) > SHOWN else "")
        )
    if said:
        yield Change(case, backend, "delegation", before, now, "; ".join(said))


def _slower(case: str, backend: str, before: _Pair, now: _Pair, *, quiet: bool) -> Iterable[Change]:
    """Lowering or compiling that took longer, where both runs did it (neither replayed) the same way (the
    artifact cache hit in both or in neither); latency only on a quiet machine, where both were measured."""
    evaluated = not before.first("replayed") and not now.first("replayed")
    old, new = before.first("compile_seconds"), now.first("compile_seconds")
    same_way = (before.first("cache") or "") == (now.first("cache") or "")
    if (
        evaluated and same_way and isinstance(old, (int, float)) and isinstance(new, (int, float)) and old > 0
        and new >= SLOWER * old and new - old >= SLOWER_SECONDS
    ):  # fmt: skip
        yield Change(
            case, backend, "lowering-time", round(old, 3), round(new, 3), f"lowering {old:.1f} s → {new:.1f} s"
        )
    old, new = before.first("latency_ms"), now.first("latency_ms")
    if (
        quiet
        and isinstance(old, (int, float))
        and isinstance(new, (int, float))
        and old > 0
        and new >= LATENCY_SLOWER * old
    ):
        yield Change(
            case, backend, "latency", round(old, 3), round(new, 3), f"median latency {old:.2f} ms → {new:.2f} ms"
        )


__all__ = ["CHANGE_KINDS", "Change", "Changes", "compare"]
