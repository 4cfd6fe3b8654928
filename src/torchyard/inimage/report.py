"""Reports: parity JSON with every metric, Markdown that opens with a summary (counts, failures and known
failures first) before the table of every result (case x backend), the environment manifest."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from torchyard import contract
from torchyard.inimage.start.loadavg import loaded_why
from torchyard.names import AUDIT_EVERY, NOISE_MISS, TRAIN_TIMED_STEPS
from torchyard.util.markdown import markdown_table

VERDICTS = {"passed": "pass", "failed": "FAIL", "error": "ERROR", "skipped": "skip", "xfailed": "known failure"}


def _worst(record: Mapping[str, Any], key: str, pick: Any) -> str:
    values = [comparison[key] for comparison in record.get("comparisons", [])]
    if not values:
        return "-"
    return f"{pick(values):.9f}" if key == "cosine" else f"{pick(values):.3g}"


def _reference(record: Mapping[str, Any]) -> str:
    kind = str(record.get("reference") or "-")
    if kind.startswith("float32"):
        return kind.split(" (", 1)[0] + " (fallback)"
    effective = kind.partition(" (")[2].split(" in effect", 1)[0]
    return kind.split(" (", 1)[0] + (f" ({effective} in effect)" if effective else "")


def eager_of(backend: str) -> str:
    """What a backend's speedup is over: eager inference, or the eager step with the same optimizer."""
    if backend.startswith("train-"):
        return "train-eager-" + backend.split(":", 1)[0].rsplit("-", 1)[1]
    return "eager"


def speed(records: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, dict[str, float | None]]]:
    """Per case and backend: the median latency (ms, device synchronized; for a train backend, one optimizer
    step's) and the speedup over eager (for a train backend, over the eager step with its optimizer)."""
    latency: dict[str, dict[str, float]] = {}
    for record in records:
        if record.get("latency_ms") is not None and record["outcome"] in ("passed", "failed"):
            latency.setdefault(record["case"], {})[record["backend"]] = float(record["latency_ms"])
    table: dict[str, dict[str, dict[str, float | None]]] = {}
    for case, backends in sorted(latency.items()):
        table[case] = {}
        for backend, value in backends.items():
            eager = backends.get(eager_of(backend))
            table[case][backend] = {"median_ms": value, "speedup": (eager / value) if eager and value else None}
    return table


def speed_markdown(
    table: Mapping[str, Mapping[str, Mapping[str, float | None]]], *, training: bool = False, ratios: bool = True
) -> str:
    """Backends as columns, cases as rows: `median ms (speedup over eager)`; the inference backends, or with
    `training` the train backends (one optimizer step's median, speedup over the eager step). Without
    `ratios`, the medians alone (a loaded machine's speedups are not shown)."""
    backends = [
        backend
        for backend in dict.fromkeys(backend for row in table.values() for backend in row)
        if backend.startswith("train-") == training
    ]
    rows = []
    for case, row in table.items():
        if not any(backend in row for backend in backends):
            continue
        cells = []
        for backend in backends:
            value = row.get(backend)
            if value is None:
                cells.append("-")
                continue
            ratio = value["speedup"] if ratios else None
            cells.append(f"{value['median_ms']:.3f} ({ratio:.2f}x)" if ratio else f"{value['median_ms']:.3f}")
        rows.append((case, *cells))
    what = "median step ms" if training else "median ms"
    what += (", speedup over the eager step" if training else ", speedup over eager") if ratios else ""
    return markdown_table((f"case ({what})", *backends), rows)


HEADERS = (
    "case", "backend", "suite", "scaled max err", "rel L2", "cosine", "tolerance (scaled / L2 / cos)",
    "reference", "compile s", "median ms", "cache", "verdict", "reason",
)  # fmt: skip
FIRST = ("failed", "error", "xfailed")  # the outcomes the summary lists first, each result on its line
REASON_CHARS = 160  # of a reason in the table of every result; the summary's lines keep theirs whole


def _row(record: Mapping[str, Any]) -> tuple[str, ...]:
    bounds = record.get("bounds") or {}
    tolerance = (
        f"{bounds['max_scaled_error']:.0e} / {bounds['max_rel_l2']:.0e} / {bounds['min_cosine']}" if bounds else "-"
    )
    latency = record.get("latency_ms")
    return (
        record["case"],
        record["backend"],
        record["suite"],
        _worst(record, "scaled_max_error", max),
        _worst(record, "rel_l2_error", max),
        _worst(record, "cosine", min) if record.get("comparisons") else "-",
        tolerance,
        _reference(record),
        f"{record.get('compile_seconds', 0.0):.2f}",
        f"{latency:.3f}" if latency is not None else "-",
        str(record.get("cache") or "-"),
        VERDICTS.get(record["outcome"], record["outcome"]) + (", replayed" if record.get("replayed") else ""),
        _shortened(str(record.get("reason", ""))),
    )


def _shortened(reason: str) -> str:
    """A reason as the table shows it: whole, or cut where it says so (parity.json and the summary keep it)."""
    return reason if len(reason) <= REASON_CHARS else f"{reason[:REASON_CHARS].rstrip()}... (whole in parity.json)"


def _delegated(delegation: Mapping[str, Any]) -> str:
    """A delegate's share in words: its subgraphs and the nodes it took, where its accounting counts them
    (Torch-TensorRT's counts its engines and what it left only)."""
    taken, left = delegation.get("delegated-nodes"), delegation["non-delegated-nodes"]
    share = f", {taken} of {taken + left} nodes delegated" if isinstance(taken, int) else f", {left} nodes left"
    return f"{delegation['subgraphs']} subgraphs{share}"


def summary(records: Sequence[Mapping[str, Any]], tests: Mapping[str, int] | None = None) -> str:
    """Counts by outcome, with what pytest's count of `tests` holds besides them, then each failure and known
    failure on a line of its own, its reason whole."""
    counts = {outcome: sum(1 for r in records if r["outcome"] == outcome) for outcome in VERDICTS}
    text = "**" + (", ".join(f"{count} {VERDICTS[o]}" for o, count in counts.items() if count) or "no results")
    text += f"** ({len(records)} results)" + _pytest_count(tests) + "\n"
    audited = {(r["case"], r["backend"]): str(r["audit"]) for r in records if r.get("audit")}
    if audited:
        differ = sorted(
            f"`{case}` on {backend}: {audit}" for (case, backend), audit in audited.items() if audit != "same"
        )
        text += (
            f"\n**Cache audit**: {len(audited)} kept verdicts evaluated again, as the rotation asks; "
            + (f"{len(differ)} differ, and fail the run: " + "; ".join(differ) if differ else "each the same")
            + ".\n"
        )
    eager = [r for r in records if r.get("not_compiled")]
    if eager:
        text += (
            f"\n**Not compiled**: {len(eager)} results of a compiled backend ran eagerly on some call (dynamo's "
            "reason is each one's): they fail, as no compiled code was judged.\n"
        )
    text += _noise_line(records)
    first = sorted((r for r in records if r["outcome"] in FIRST), key=lambda r: FIRST.index(r["outcome"]))
    if first:
        text += "\n" + "".join(
            f"- {VERDICTS[r['outcome']]}: `{r['case']}` on {r['backend']} ({r['suite']}): {r.get('reason', '')}\n"
            + (where_it_diverges(r["diverges"]) if r.get("diverges") and r["outcome"] in ("failed", "xfailed") else "")
            for r in first
        )
    return text


def _noise_line(records: Sequence[Mapping[str, Any]]) -> str:
    """How many results the noise rule held to eager's own error, and how many it failed that the table's
    bounds alone would pass ("" where it held none)."""
    held = [r for r in records if any(c.get("noise") for c in r.get("comparisons", ()))]
    if not held:
        return ""
    tighter = [r for r in held if r["outcome"] in ("failed", "xfailed") and NOISE_MISS in str(r.get("reason", ""))]
    factors = sorted({f"{r['bounds']['noise_factor']:g}" for r in held if r.get("bounds", {}).get("noise_factor")})
    return (
        f"\n**Noise rule**: {len(held)} results held to {' or '.join(factors)} times eager's own error against "
        "float64 on each output, the table's bounds their ceiling"
        + (f"; {len(tighter)} of them fail where the table's bounds alone would pass" if tighter else "")
        + ".\n"
    )


def replayed_line(records: Sequence[Mapping[str, Any]]) -> str:
    """How many results the result cache replayed, and since when ("" where none was)."""
    times = sorted(str(r["replayed"]) for r in records if r.get("replayed"))
    if not times:
        return ""
    oldest = times[0].replace("T", " ").replace("+00:00", " UTC")
    return (
        f"**Replayed**: {len(times)} of {len(records)} results, kept by earlier runs in which they passed; nothing "
        f"that decides them has changed since (the oldest evaluated {oldest}): neither their keys nor what their "
        "evaluations read (files, folders, variables, the project's code that ran). A trusted run evaluates a "
        f"kept verdict again at its {AUDIT_EVERY}th replay to audit the cache. `torchyard test --rerun` evaluates "
        "them all again.\n\n"
    )


def compiler_caches_line(records: Sequence[Mapping[str, Any]]) -> str:
    """How often inductor's and AOTAutograd's own caches served the compiles this run made ("" where it made
    none): a result evaluated again after a change elsewhere still compiles from them."""
    evaluated = [r.get("compiler_caches") or {} for r in records if not r.get("replayed")]
    total = {name: sum(int(counts.get(name, 0)) for counts in evaluated) for name in COUNTED}
    parts = [
        f"{what} {total[hit]} of {total[hit] + total[miss]} hit"
        for what, hit, miss in (
            ("inductor's compiled graphs", "fxgraph_cache_hit", "fxgraph_cache_miss"),
            ("AOTAutograd's", "autograd_cache_hit", "autograd_cache_miss"),
        )
        if total[hit] + total[miss]
    ]
    return f"**Compiler caches**: {', '.join(parts)}.\n\n" if parts else ""


COUNTED = ("fxgraph_cache_hit", "fxgraph_cache_miss", "autograd_cache_hit", "autograd_cache_miss")


def _pytest_count(tests: Mapping[str, int] | None) -> str:
    """Why pytest's last line counts otherwise: tests, not results, and tests that make no row here."""
    if not tests or not (tests.get("self-tests") or tests.get("others")):
        return ""
    parts = [f"{tests['with-results']} made these results"] if tests.get("with-results") else []
    parts += [f"{tests['self-tests']} are harness self-tests"] if tests.get("self-tests") else []
    parts += [f"{tests['others']} are tests of the project's own"] if tests.get("others") else []
    return f"; of the {sum(tests.values())} tests pytest counts, " + ", ".join(parts)


def diverges_in_brief(diverges: Mapping[str, Any]) -> str:
    """The failing test's line's tail: the node or compiler step where it diverges ("" where neither was found)."""
    node = diverges.get("node")
    if diverges.get("pass"):
        return f"; diverges at {diverges['pass']}"
    if not node:
        return ""
    where = f", {node['source']}" if node.get("source") else ""
    return f"; diverges first at node {node['node']} ({node['operator']}{where})"


OWN_INPUTS = "the program's own inputs and weights"  # a first node whose inputs are no other node's


def where_it_diverges(diverges: Mapping[str, Any]) -> str:
    """The block under a failure's line that says where it diverges (`evaluation.localize`'s record): the first node
    out of bounds with its error and its inputs', or the compiler step the bisector named, or why neither."""
    took = f"{float(diverges.get('seconds', 0.0)):.1f} s"
    node = diverges.get("node")
    if diverges.get("pass"):
        return f"  - where it diverges: {diverges['pass']} (torch's compiler bisector, {took})\n"
    if not node:
        return f"  - where it diverges: not found, {diverges.get('note', '')} ({took})\n"
    where = f" at {node['source']}" if node.get("source") else ""
    ran = f", run by {node['delegate']}" if node.get("delegate") else ""
    text = f"  - where it diverges: node `{node['node']}` ({node['operator']}){where}{ran}: {node['error']['problem']}"
    text += f" ({took}, {diverges.get('compared', 0)} nodes compared)\n"
    inputs = ", ".join(
        f"`{item['node']}` (scaled max err {item['scaled_max_error']:.3g}, rel L2 {item['rel_l2_error']:.3g})"
        for item in node.get("inputs", [])
    )
    return text + f"    - its inputs, within the bounds: {inputs or OWN_INPUTS}\n"


def notes(records: Sequence[Mapping[str, Any]], manifest: Mapping[str, Any]) -> str:
    """What qualifies the table: references other than float64, torch.compile's graph breaks, cases the
    artifact cache could not key (or that opt out of it), and speed figures a loaded machine cannot support."""
    references: dict[str, set[str]] = {}
    for r in records:
        if str(r.get("reference", "")).startswith("float32") or " in effect" in str(r.get("reference", "")):
            references.setdefault(str(r["case"]), set()).add(str(r["reference"]))
    # A train step's reference says what the inference reference says, without the line that narrowed it: one line
    lines = sorted(
        f"- reference for `{case}`: {text}"
        for case, texts in references.items()
        for text in texts
        if not any(other != text and other.startswith(text) for other in texts)
    )
    lines += sorted(
        {
            f"- graph breaks in `{r['case']}` ({r['backend']}): {r['graph_breaks']}, {r.get('graphs')} graphs: "
            + "; ".join(r.get("graph_break_reasons") or [])
            for r in records
            if r.get("graph_breaks")
        }
    )
    lines += sorted(
        {
            f"- recompiled `{r['case']}` ({r['backend']}): {r['recompiles']} times: "
            + "; ".join(r.get("recompile_reasons") or [])
            for r in records
            if r.get("recompiles")
        }
    )
    lines += sorted(
        {
            f"- delegation of `{r['case']}` ({r['backend']}): {_delegated(d)}; "
            f"left to {d.get('left-to', 'portable kernels')}: {', '.join(d['left-out'])}"
            for r in records
            if (d := r.get("delegation")) and d.get("left-out")
        }
    )
    lines += sorted(
        {
            f"- result cache: `{r['case']}` ({r['backend']}) is evaluated every run: {r['unkeepable']}"
            for r in records
            if r.get("unkeepable")
        }
    )
    lines += sorted(
        {
            f"- artifact cache not used for `{r['case']}` ({r['backend']}): {r.get('cache_why') or 'not keyable'}"
            for r in records
            if r.get("cache") == "unkeyable" or r.get("cache_why")
        }
    )
    loaded = loaded_why(manifest)
    if loaded:
        lines.append(
            f"- speed: the machine was loaded, so speedups are withheld and latencies are upper bounds: {loaded}"
        )
    return "".join(f"{line}\n" for line in lines)


def markdown(
    records: Sequence[Mapping[str, Any]],
    manifest: Mapping[str, Any],
    suites: Sequence[str] = (),
    self_tests: Mapping[str, Any] | None = None,
    not_collected: Sequence[str] = (),
    *,
    finished: str = "",
    pytest_tests: Mapping[str, int] | None = None,
) -> str:
    """What a person reads, under a title that names the run's `suites` and when it `finished`: what the
    harness's self-tests did, the summary (counts, then the failures and known failures), notes, one row per
    case x backend (per suite where they differ), speed."""
    device = manifest.get("device", "?")
    title = f"### torchyard parity: {manifest.get('accelerator', '?')} on {device}, torch {manifest.get('torch', '?')}"
    title += f", {manifest.get('trust', 'trusted')} run"
    title += f"; suites: {', '.join(suites)}" if suites else ""
    title += f"; finished {finished.replace('T', ' ').replace('+00:00', ' UTC')}\n\n" if finished else "\n\n"
    noted = notes(records, manifest)
    ratios = not loaded_why(manifest)
    timed = speed(records)
    text = (
        title
        + self_test_line(self_tests)
        + "".join(f"**Not collected**: {where}\n\n" for where in not_collected)
        + replayed_line(records)
        + compiler_caches_line(records)
        + summary(records, pytest_tests)
        + (f"\n{noted}" if noted else "")
        + "\n#### Every result\n\n"
        + every_result(records)
        + "\n#### Speed: median latency after warm-up, device synchronized\n\n"
        + speed_markdown(timed, ratios=ratios)
    )
    if any(backend.startswith("train-") for row in timed.values() for backend in row):
        text += (
            f"\n#### Training speed: median of {TRAIN_TIMED_STEPS} optimizer steps after the compared one, device "
            "synchronized\n\n" + speed_markdown(timed, training=True, ratios=ratios)
        )
    return text


CACHE_LEGEND = (
    "`cache`: what the artifact cache did with a saved program (export, AOTInductor, ExecuTorch, Torch-TensorRT); "
    "`-` where there is none to keep (eager, inductor and the training steps, whose compiles inductor's own "
    "caches keep)"
)


def every_result(records: Sequence[Mapping[str, Any]]) -> str:
    """One row per result, but a backend skipped for every case for one reason (TensorRT on a CPU entry) is one
    line instead of a row per case and suite; then what the cache column says."""
    by_backend: dict[str, set[str]] = {}
    for record in records:
        reason = str(record.get("reason", "")) if record["outcome"] == "skipped" else "\0ran"
        by_backend.setdefault(record["backend"], set()).add(reason)
    folded = {
        backend: reasons.pop()
        for backend, reasons in by_backend.items()
        if len(reasons) == 1 and "\0ran" not in reasons
    }
    rows = [_row(record) for record in records if record["backend"] not in folded]
    text = markdown_table(HEADERS, rows) if rows else ""
    text += "".join(
        f"\n- `{backend}` skipped for every case ({sum(r['backend'] == backend for r in records)} results): {why}\n"
        for backend, why in sorted(folded.items())
    )
    return text + f"\n{CACHE_LEGEND}.\n"


def self_test_line(self_tests: Mapping[str, Any] | None) -> str:
    """The harness's self-tests in a line: how many ran and failed, and how many a proof of this stack left out
    (`proofs`)."""
    if not self_tests:
        return ""
    ran, failed, left_out = self_tests["ran"], self_tests["failed"], self_tests["left-out"]
    line = f"Harness self-tests: {ran} ran" + (f", {failed} failed" if failed else "")
    if failed:  # the run fails for it, whatever the results below say
        named = ", ".join(f"`{name}`" for name in self_tests.get("failed-tests", [])[:5])
        line += (
            f", which fails the run ({named}; junit.xml has each one's traceback)" if named else ", which fails the run"
        )
    if left_out:
        line += (
            f"; {left_out} left out, proven on this stack by the run of {self_tests['proven-by']} "
            "(`torchyard test --rerun-self-tests` runs them)"
        )
    other = self_tests.get("other-suites") or {}
    if other.get("left-out"):
        line += f"; {other['left-out']} left out, of suites this run does not have ({', '.join(other['suites'])})"
    return line + ".\n\n"


def write_reports(
    report_dir: Path, records: Sequence[Mapping[str, Any]], manifest: Mapping[str, Any], extra: Mapping[str, Any]
) -> dict[str, Path]:
    """parity.json, parity.md and env.json in `report_dir` (the host puts parity.md in the step summary)."""
    report_dir.mkdir(parents=True, exist_ok=True)
    ordered = sorted(records, key=lambda r: (r["case"], r["backend"], r["suite"]))
    paths = {
        "json": report_dir / contract.PARITY_JSON,
        "markdown": report_dir / contract.PARITY_MARKDOWN,
        "env": report_dir / contract.ENVIRONMENT_JSON,
    }
    paths["json"].write_text(
        json.dumps(
            {"environment": manifest, **extra, "speed": speed(ordered), "results": ordered}, indent=2, default=str
        )
        + "\n"
    )
    table = markdown(
        ordered, manifest, extra.get("suites", ()), extra.get("self-tests"), extra.get("not-collected", ()),
        finished=str(extra.get("finished", "")), pytest_tests=extra.get("pytest-tests"),
    )  # fmt: skip
    paths["markdown"].write_text(table)
    paths["env"].write_text(json.dumps(manifest, indent=2, default=str) + "\n")
    return paths
