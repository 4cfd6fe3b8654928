"""What a change changed (issue 60): a run held to its baseline, case by case and backend by backend, reports
exactly the changes made and nothing for what did not change; the baseline is the entry's last trusted run,
which an untrusted run reads and never writes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from torchyard.errors import UsageError
from torchyard.reports import html, markdown
from torchyard.reports.baseline import hold_to_baseline, store_for
from torchyard.reports.compare import compare
from torchyard.reports.merge import Cell, Run, merge
from torchyard.run.stamp import HOST_LINE

BOUNDS = {"max_scaled_error": 1e-4, "max_rel_l2": 1e-5, "min_cosine": 0.9999999}


def result(case: str, backend: str, **given: Any) -> dict[str, Any]:
    """One parity result as the harness writes it, passing with small errors unless `given` says otherwise."""
    scaled, rel = given.pop("errors", (1e-7, 1e-8))
    return {
        "case": case, "backend": backend, "suite": "parity", "outcome": "passed", "status": "passed", "reason": "",
        "bounds": BOUNDS, "compile_seconds": 2.0, "first_lowering": False, "artifact_bytes": 0, "cache": "",
        "replayed": "",
        "latency_ms": 1.0, "graphs": None, "graph_breaks": None, "graph_break_reasons": [], "delegation": None,
        "comparisons": [{"output": "output", "scaled_max_error": scaled, "rel_l2_error": rel, "cosine": 1.0}],
        **given,
    }  # fmt: skip


DELEGATED = {"subgraphs": 1, "delegated-nodes": 12, "non-delegated-nodes": 1, "left-out": []}
BASELINE = [
    result("mlp", "inductor", graphs=1, graph_breaks=0),
    result("mlp", "executorch-xnnpack", artifact_bytes=50_000, delegation=DELEGATED),
    result("attention", "export"),
    result("attention", "inductor", graphs=1, graph_breaks=0),
    result("steady", "export"),
    result("steady", "inductor", graphs=1, graph_breaks=0),
]


def run(results: list[dict[str, Any]], **environment: Any) -> Run:
    return Run("cpu", Path("parity.json"), "fp32", {"entry": "cpu", "torch": "2.14.1", **environment}, tuple(results))


def changed(results: list[dict[str, Any]], **environment: Any) -> list[tuple[str, str, str]]:
    found = compare(run(results, **environment), run(BASELINE))
    return [(change.case, change.backend, change.kind) for change in found.changes]


def test_an_unchanged_run_reports_nothing_but_its_count() -> None:
    same = compare(run(BASELINE), run(BASELINE))
    assert same.changes == () and same.unchanged == len(BASELINE)
    assert same.markdown().splitlines()[-1] == "- 6 cases and backends unchanged; nothing changed"


def test_each_kind_of_change_is_reported_for_its_case_and_backend_alone() -> None:
    """The checks an outside repository's two cases modules make: a debug print (a graph break), an operator
    XNNPACK does not take (a split delegate), a float32 reformulation whose error grows tenfold while it
    passes, and a case that does not change."""
    print_added = result("mlp", "inductor", graphs=2, graph_breaks=1, graph_break_reasons=["builtin print"])
    split = {"subgraphs": 2, "delegated-nodes": 11, "non-delegated-nodes": 2, "left-out": ["aten.cumsum.default"]}
    xnnpack = result("mlp", "executorch-xnnpack", artifact_bytes=50_000, delegation=split)
    drifted = result("attention", "export", errors=(2e-5, 1e-8))  # 0.1% -> 20% of its bound: passes, grew
    now = [print_added, xnnpack, drifted, *BASELINE[3:]]
    assert changed(now) == [
        ("attention", "export", "error"),
        ("mlp", "executorch-xnnpack", "delegation"),
        ("mlp", "inductor", "graph-breaks"),
    ]
    found = compare(run(now), run(BASELINE))
    said = {change.kind: change.said for change in found.changes}
    assert said["graph-breaks"] == "graph breaks 0 → 1 (builtin print)"
    assert said["delegation"] == (
        "delegated subgraphs 1 → 2; nodes left to portable kernels 1 → 2; newly left out: aten.cumsum.default"
    )
    assert said["error"] == "output: scaled_max_error tenfold or more, 1e-07 → 2e-05 (0.10% → 20.00% of its bound)"
    assert found.unchanged == 3  # attention on inductor, steady on both


def test_an_error_is_read_against_the_noise_rules_bound_where_it_held_the_output() -> None:
    """A result the noise rule held to 8 times eager's own error: its share of the bound is of that bound (vit-pytorch's
    CaiT read `47.19% of its bound` where it failed, against the table's)."""
    comparison = {"output": "output", "scaled_max_error": 3.9e-6, "rel_l2_error": 4.7e-6, "cosine": 1.0}
    failed = result("attention", "export", comparisons=[{**comparison, "held_to": [1.48e-6, 1.34e-6]}])
    said = {
        change.kind: change.said
        for change in compare(run([*BASELINE[:2], failed, *BASELINE[3:]]), run(BASELINE)).changes
    }
    assert said["error"] == (
        "output: rel_l2_error tenfold or more, 1e-08 → 4.7e-06 (0.75% → 350.75% of its bound); "
        "its bound 1e-05 → 1.34e-06"
    ), said


def test_recompilations_that_rose_are_reported_with_the_guard_that_failed() -> None:
    """A policy whose forward reads a counter it bumps (or a batch of a new shape) is compiled again per call:
    the compiled path still passes, and the deployment pays a compile where it paid none."""
    again = result(
        "steady", "inductor", graphs=2, graph_breaks=0, recompiles=1,
        recompile_reasons=["0/0: self.calls == 1", "0/1: tensor 'x' size mismatch at index 0"],
    )  # fmt: skip
    found = compare(run([*BASELINE[:5], again]), run([*BASELINE[:5], {**BASELINE[5], "recompiles": 0}]))
    assert [(change.case, change.backend, change.kind) for change in found.changes] == [
        ("steady", "inductor", "recompilations")
    ]
    assert found.changes[0].said == (
        "recompilations 0 → 1 (0/0: self.calls == 1; 0/1: tensor 'x' size mismatch at index 0)"
    )
    assert compare(run(BASELINE), run([*BASELINE[:5], again])).changes == ()  # fewer is no change to report
    assert compare(run([*BASELINE[:5], again]), run(BASELINE)).changes == ()  # a baseline that measured none


def test_torch_tensorrts_engines_split_and_nodes_left_to_pytorch_are_a_delegation_change() -> None:
    """Torch-TensorRT counts the engines it built and the nodes it left to PyTorch (not the nodes it took)."""
    one = {"subgraphs": 1, "non-delegated-nodes": 0, "left-out": [], "left-to": "PyTorch"}
    two = {"subgraphs": 2, "non-delegated-nodes": 1, "left-out": ["aten.cumsum.default"], "left-to": "PyTorch"}
    found = compare(run([result("mlp", "tensorrt", delegation=two)]), run([result("mlp", "tensorrt", delegation=one)]))
    assert [change.said for change in found.changes] == [
        "delegated subgraphs 1 → 2; nodes left to PyTorch 0 → 1; newly left out: aten.cumsum.default"
    ]


def test_what_a_run_wrote_out_of_range_or_never_measured_is_no_change_and_no_crash(tmp_path: Path) -> None:
    """The review of issue 60's second round: an integer past a float's range crashed the host's comparison (and
    the page), leaving the run's own `changes` in place; a baseline from before a signal existed read as its
    zero; times from two machines were compared; a run's `left-to` was shown as written."""
    huge = 10**400
    wild = result("mlp", "inductor", graphs=1, graph_breaks=0, recompiles=huge, compile_seconds=huge)
    found = compare(run([wild, *BASELINE[1:]]), run(BASELINE))  # BASELINE measured no recompiles
    assert found.changes == ()
    forged = reports(tmp_path / "forged", [wild, *BASELINE[1:]], trust="untrusted")
    data = json.loads((forged / "parity.json").read_text())
    invented = {"changes": [{"case": "mlp", "backend": "inductor", "kind": "outcome", "said": "invented"}]}
    (forged / "parity.json").write_text(json.dumps({**data, "changes": invented}))
    assert (
        hold_to_baseline("cpu", forged, named=reports(tmp_path / "main", BASELINE), store=tmp_path / "s", trusted=False)
        == 0
    )
    assert json.loads((forged / "parity.json").read_text())["changes"]["changes"] == []
    page = html.render(merge([forged]))  # renders: a number past a float's range is shown as nothing
    assert "0" * 50 not in page and "lowered or compiled in inf" not in page
    elsewhere = run([result("mlp", "export", compile_seconds=9.0)], device="Apple M4")
    assert compare(elsewhere, run([result("mlp", "export")])).changes == ()  # another machine: times not compared
    markup = {"subgraphs": 2, "non-delegated-nodes": 1, "left-out": [], "left-to": "[click](https://x)"}
    one = {"subgraphs": 1, "non-delegated-nodes": 0, "left-out": []}
    said = compare(run([result("m", "tensorrt", delegation=markup)]), run([result("m", "tensorrt", delegation=one)]))
    assert said.changes[0].said == "delegated subgraphs 1 → 2; nodes left to portable kernels 0 → 1"


def test_a_runs_own_words_on_the_compatibility_page_render_as_text(tmp_path: Path) -> None:
    """The review: the Markdown page (a step summary) printed a run's versions and case names as written."""
    folder = reports(tmp_path / "cpu", [result("x`](https://evil) ![i](https://e)", "export")])
    data = json.loads((folder / "parity.json").read_text())
    data["environment"]["torch"] = "2.1 [click](https://evil)"
    (folder / "parity.json").write_text(json.dumps(data))
    page = markdown.render(merge([folder]))
    assert "`fp32; torch 2.1 [click](https://evil)" in page and "| `x?](https://evil) ![i](https://e)` |" in page


def test_outcomes_programs_and_times_that_changed_are_reported() -> None:
    now = [
        result("mlp", "inductor", outcome="failed", status="failed", reason="scaled max error 3e-4 > 1e-4"),
        result("mlp", "executorch-xnnpack", artifact_bytes=80_000, delegation=DELEGATED),
        result("attention", "export", compile_seconds=9.0),
        *BASELINE[3:],
    ]
    found = compare(run(now), run(BASELINE))
    assert [(change.case, change.backend, change.kind) for change in found.changes] == [
        ("attention", "export", "lowering-time"),
        ("mlp", "executorch-xnnpack", "program-size"),
        ("mlp", "inductor", "outcome"),
    ]
    assert found.changes[-1].said == "passed → failed: scaled max error 3e-4 > 1e-4"
    # The adopter's pull request under act: its export was the process's first (the baseline's self-tests had
    # warmed the stack up), 0.3 s → 1.9 s by the warm-up alone. Lowerings of two kinds are not compared.
    warmed = run([result("mlp", "export", compile_seconds=0.3)])
    cold = run([result("mlp", "export", compile_seconds=1.9, first_lowering=True)])
    assert compare(cold, warmed).changes == ()
    older = run([{k: v for k, v in result("mlp", "export").items() if k != "first_lowering"}])
    assert compare(run([result("mlp", "export", compile_seconds=9.0)]), older).changes == ()  # unknown: not compared


@pytest.mark.parametrize(
    ("before", "after"),
    [
        ({"compile_seconds": 2.0, "cache": "hit"}, {"compile_seconds": 9.0, "cache": "miss"}),  # cached then
        ({"compile_seconds": 2.0, "replayed": "2026-12-01"}, {"compile_seconds": 9.0}),  # not lowered then
        ({"compile_seconds": 2.0}, {"compile_seconds": 2.9}),  # within twice
        ({"compile_seconds": 0.1}, {"compile_seconds": 0.5}),  # five times, by less than a second
        ({"errors": (1e-9, 1e-10)}, {"errors": (5e-7, 1e-10)}),  # 500 times nothing is still under 1% of the bound
        ({"artifact_bytes": 50_000}, {"artifact_bytes": 52_000}),  # a few KiB
        ({"latency_ms": 1.0}, {"latency_ms": 9.0}),  # a loaded machine's (or unknown) latency says nothing
    ],
)
def test_noise_is_no_change(before: dict[str, Any], after: dict[str, Any]) -> None:
    assert compare(run([result("mlp", "export", **after)]), run([result("mlp", "export", **before)])).changes == ()


def test_latency_is_compared_only_on_quiet_machines_and_the_stacks_are_named_where_they_differ() -> None:
    quiet = compare(run([result("mlp", "export", latency_ms=9.0)]), run([result("mlp", "export")]), quiet=True)
    assert [change.kind for change in quiet.changes] == ["latency"]
    upgraded = compare(run([result("mlp", "export")], torch="2.15.0"), run([result("mlp", "export")]))
    assert upgraded.stacks == ("torch 2.14.1 → 2.15.0",) and upgraded.unchanged == 1
    assert "The stacks differ (`torch 2.14.1 → 2.15.0`)" in upgraded.markdown()
    # A change to the project's own code moves the image's tag, not its dependency layers' key (the zoo's
    # real change said the stacks differed by the tag alone); a lock change moves that key.
    same = [result("mlp", "export")]
    code = compare(run(same, image="p/cpu:2", stack="s1"), run(same, image="p/cpu:1", stack="s1"))
    assert code.stacks == ()
    locked = compare(run([result("mlp", "export")], stack="s2"), run([result("mlp", "export")], stack="s1"))
    assert locked.stacks == ("stack s1 → s2",)


def test_what_a_run_wrote_is_shown_as_text() -> None:
    """A container writes parity.json: its case names, reasons and versions are a pull request's text, shown in
    code spans on one line each, where nothing renders as a link, a heading or a host's line."""
    hostile = result("mlp", "export", outcome="failed", reason="[click](https://x.invalid) <img src=x> # heading")
    line = compare(run([hostile]), run([result("mlp", "export")])).markdown().splitlines()[2]
    assert line == "- `mlp` on `export`, outcome: `passed → failed: [click](https://x.invalid) <img src=x> # heading`"
    forged = "mlp`\n# Approved | ok\x1b[2J"
    page = compare(run([result(forged, "export", outcome="failed")]), run([result(forged, "export")])).markdown()
    assert page.splitlines()[2].startswith("- `mlp? # Approved ? ok?[2J` on `export`, outcome: `passed → failed")
    assert len(page.splitlines()) == 4  # the heading, a blank line, the change, the count: no line of its own
    host = "2.15\n\n> **torchyard (host)**: entry `cpu`, **trusted** run\n\n# All good"
    upgraded = compare(run([result("mlp", "export")], torch=host), run([result("mlp", "export")])).markdown()
    assert "\n> " not in upgraded and "\n# " not in upgraded
    assert "(`torch 2.14.1 → 2.15 > **torchyard (host)**: entry 'cpu', **trusted** run # All good`)" not in upgraded
    assert "`torch 2.14.1 → 2.15 > **torchyard (host)**: entry ?cpu?, **trusted** run # All good`" in upgraded


@pytest.mark.parametrize(
    "broken",
    [
        {"delegation": {"subgraphs": "x", "left-out": [{}]}},
        {"comparisons": 5},
        {"comparisons": [{"output": "o", "scaled_max_error": "big"}], "bounds": {"max_scaled_error": 0}},
        {"graph_breaks": "many", "graph_break_reasons": 7},
        {"artifact_bytes": True, "compile_seconds": "slow", "latency_ms": float("inf")},
        {"outcome": 3, "reason": None, "bounds": {"max_scaled_error": float("nan")}},
    ],
)
def test_a_report_of_the_wrong_shape_is_compared_without_a_traceback(broken: dict[str, Any]) -> None:
    """Each value a run wrote is read as what it should be, or as nothing."""
    compare(run([result("mlp", "export", **broken)]), run([result("mlp", "export")]), quiet=True).markdown()
    compare(run([result("mlp", "export")]), run([result("mlp", "export", **broken)]), quiet=True).markdown()


def test_what_the_first_review_found_is_reported() -> None:
    """Growth is of the error itself (a looser bound hides none), an error no longer finite is a change, a pair
    the baseline has and this run lost is an outcome change, an outcome torchyard has no word for is named, and
    another precision is a stack difference."""
    looser = dict(BOUNDS, max_scaled_error=1e-2)
    grown = compare(run([result("mlp", "export", errors=(9e-6, 1e-8), bounds=looser)]), run([result("mlp", "export")]))
    assert [change.kind for change in grown.changes] == ["error"] and "its bound 0.0001 → 0.01" in grown.changes[0].said
    nan = compare(run([result("mlp", "export", errors=(float("nan"), 1e-8))]), run([result("mlp", "export")]))
    assert nan.changes[0].said == "output: scaled_max_error is no longer finite (1e-07 → inf)"
    lost = compare(run([result("mlp", "export")]), run([result("mlp", "export"), result("mlp", "inductor")]))
    assert [(change.backend, change.kind, change.after) for change in lost.changes] == [
        ("inductor", "outcome", "not run")
    ]
    odd = compare(run([result("mlp", "export", outcome="xpassed")]), run([result("mlp", "export")]))
    assert odd.changes[0].said == "passed → xpassed"
    other = Run("cpu", Path("parity.json"), "bf16", {"entry": "cpu", "torch": "2.14.1"}, tuple(BASELINE))
    assert compare(other, run(BASELINE)).stacks == ("precision fp32 → bf16",)


def reports(folder: Path, results: list[dict[str, Any]], *, trust: str = "trusted") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    environment = {"entry": "cpu", "trust": trust, "torch": "2.14.1"}
    data = {"environment": environment, "precision": "fp32", "results": results}
    (folder / "parity.json").write_text(json.dumps(data))
    (folder / "parity.md").write_text(f"{HOST_LINE} entry `cpu`, image `x`, **{trust}** run\n## Parity\n")
    return folder


def test_a_trusted_run_becomes_the_baseline_and_an_untrusted_one_reads_it_and_never_writes_it(tmp_path: Path) -> None:
    store = store_for("project-0123", {"XDG_CACHE_HOME": str(tmp_path / "cache")})
    first = reports(tmp_path / "first", BASELINE)
    assert hold_to_baseline("cpu", first, named=None, store=store, trusted=True) == 0  # nothing to compare yet
    kept = store / "cpu" / "parity.json"
    assert json.loads(kept.read_text())["results"] == BASELINE
    broken = [result("mlp", "inductor", graphs=2, graph_breaks=1), *BASELINE[1:]]
    pull_request = reports(tmp_path / "pr", broken, trust="untrusted")
    status = hold_to_baseline("cpu", pull_request, named=None, store=store, trusted=False, fail_on=("graph-breaks",))
    assert status == 1  # the entry fails on graph breaks
    assert json.loads(kept.read_text())["results"] == BASELINE  # never written by the untrusted run
    page = (pull_request / "parity.md").read_text().splitlines()
    assert page[0].startswith(HOST_LINE) and page[2].startswith("### What changed against the trusted run of `cpu`")
    assert "**(fails this run: `fail-on-change`)**" in (pull_request / "parity.md").read_text()
    changes = json.loads((pull_request / "parity.json").read_text())["changes"]
    assert [change["kind"] for change in changes["changes"]] == ["graph-breaks"] and changes["unchanged"] == 5
    assert hold_to_baseline("cpu", pull_request, named=None, store=store, trusted=False) == 0  # reported only


def test_a_named_baseline_is_the_entrys_run_under_a_folder_and_a_kept_file_that_is_a_link_is_none(
    tmp_path: Path,
) -> None:
    artifact = tmp_path / "artifact"
    reports(artifact / "cpu", BASELINE)
    other = reports(artifact / "cuda", BASELINE)
    data = json.loads((other / "parity.json").read_text())
    (other / "parity.json").write_text(json.dumps({**data, "environment": {"entry": "cuda"}}))
    now = reports(tmp_path / "now", [result("mlp", "inductor", graphs=1, graph_breaks=0)])
    store = tmp_path / "store"
    assert hold_to_baseline("cpu", now, named=artifact, store=store, trusted=False) == 0
    assert json.loads((now / "parity.json").read_text())["changes"]["removed"][:1] == ["attention on export"]
    with pytest.raises(UsageError, match="no one run of entry 'rocm' there"):
        hold_to_baseline("rocm", now, named=artifact, store=store, trusted=False)
    with pytest.raises(UsageError, match=r"no one run of entry 'rocm' there \(runs of: cuda\)"):
        hold_to_baseline("rocm", now, named=other, store=store, trusted=False)  # one run, another entry's
    (store / "cpu").mkdir(parents=True)
    (store / "cpu" / "parity.json").symlink_to(artifact / "cpu" / "parity.json")
    fresh = reports(tmp_path / "fresh", BASELINE)
    assert hold_to_baseline("cpu", fresh, named=None, store=store, trusted=False) == 0
    assert json.loads((fresh / "parity.json").read_text())["changes"] is None  # a link is no kept baseline


def test_the_compatibility_page_marks_the_cells_that_changed(tmp_path: Path) -> None:
    store = tmp_path / "store"
    reports(tmp_path / "main" / "cpu", BASELINE)
    now = reports(tmp_path / "pr" / "cpu", [result("mlp", "inductor", graphs=2, graph_breaks=1), *BASELINE[1:]])
    hold_to_baseline("cpu", now, named=tmp_path / "main", store=store, trusted=False)
    table = merge([now])
    assert table.cell("cpu", "mlp", "inductor").changes == ["graph-breaks: graph breaks 0 → 1"]
    assert table.cell("cpu", "mlp", "export").changes == []
    # export (not run), inductor (changed, and short of one graph), executorch-xnnpack (one node left out)
    assert "| `mlp` |  | ✅ Δ (1 graph break) | ✅ (92% delegated in 1 subgraph) |" in markdown.render(table)
    page = html.render(table)
    assert 'class="passed changed"' in page and "changed: graph-breaks: graph breaks 0 → 1" in page
    assert 'title="1 graph break; changed: graph-breaks: graph breaks 0 → 1"' in page
    assert "pass Δ<br><small>1 graph break</small>" in page and "; program 50,000 bytes</p>" in page


def test_a_cell_names_what_it_measured_short_of_the_best_and_nothing_else() -> None:
    """Issue 60: the page shows graph breaks, recompilations and a delegate's share where they are not the best
    possible; a whole delegated program in one subgraph, or no compile at all, adds nothing. A run's values are
    read as counts or as nothing (its code wrote them)."""
    whole = {"subgraphs": 1, "delegated-nodes": 40, "non-delegated-nodes": 0, "left-out": []}
    split = {"subgraphs": 3, "delegated-nodes": 30, "non-delegated-nodes": 10, "left-out": ["aten.cumsum.default"]}
    assert Cell([result("m", "executorch-xnnpack", delegation=whole)]).signals == []
    assert Cell([result("m", "executorch-xnnpack", delegation=split)]).signals == ["75% delegated in 3 subgraphs"]
    assert Cell([result("m", "inductor", graphs=3, graph_breaks=2, recompiles=1)]).signals == [
        "2 graph breaks", "1 recompile",
    ]  # fmt: skip
    assert Cell([result("m", "inductor", graphs=1, graph_breaks=0, recompiles=0)]).signals == []
    engines = {"subgraphs": 2, "non-delegated-nodes": 3, "left-out": ["aten.cumsum.default"], "left-to": "PyTorch"}
    assert Cell([result("m", "tensorrt", delegation=engines)]).signals == ["2 subgraphs, 3 nodes left out"]
    forged = {"subgraphs": "many", "delegated-nodes": True, "non-delegated-nodes": -4}
    hostile = result("m", "inductor", graph_breaks="1<script>", recompiles=True, delegation=forged)
    assert Cell([hostile]).signals == []


def test_a_run_cannot_bring_its_own_changes_and_a_report_that_does_not_read_is_compared_with_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review of issue 60: a pull request's run that writes `changes` itself has them replaced (no baseline: none);
    a parity.json with no results is said in one line, the run's status standing, and the next entries run."""
    forged = reports(tmp_path / "forged", BASELINE, trust="untrusted")
    data = json.loads((forged / "parity.json").read_text())
    data["changes"] = {"changes": [{"case": "mlp", "backend": "eager", "kind": "outcome", "said": "fixed by this PR"}]}
    (forged / "parity.json").write_text(json.dumps(data))
    assert hold_to_baseline("cpu", forged, named=None, store=tmp_path / "store", trusted=False) == 0
    assert json.loads((forged / "parity.json").read_text())["changes"] is None
    assert merge([forged]).cell("forged", "mlp", "eager").changes == []
    empty = reports(tmp_path / "empty", [])
    store = tmp_path / "store"
    reports(store / "cpu", BASELINE)
    assert hold_to_baseline("cpu", empty, named=None, store=store, trusted=True) == 0
    assert "cpu: not compared with a baseline: report: " in capsys.readouterr().err
    assert json.loads((store / "cpu" / "parity.json").read_text())["results"] == BASELINE  # not kept either


def test_only_a_whole_trusted_run_becomes_the_baseline(tmp_path: Path) -> None:
    store = tmp_path / "store"
    subset = reports(tmp_path / "subset", BASELINE[:1])
    assert hold_to_baseline("cpu", subset, named=None, store=store, trusted=True, keep=False) == 0
    assert not (store / "cpu").exists()  # `-k mlp` kept nothing


def test_a_narrowed_run_compares_only_what_it_ran_and_says_what_it_left_out_in_one_line(tmp_path: Path) -> None:
    """Issue 71, item 8: `-- -k detr_transformer` listed every other pair as `passed → not run`, twice (a change
    each and again as "in the baseline only"). A run given pytest arguments compares the pairs it ran; the rest
    is one count. A whole run that lost a pair still reports it."""
    ran = [BASELINE[0], BASELINE[1]]
    narrowed = compare(run(ran), run(BASELINE), narrowed="-k mlp")
    assert narrowed.changes == () and narrowed.removed == () and narrowed.left_out == 4
    text = narrowed.markdown()
    assert "not run" in text and text.count("not run") == 1, text
    assert "- 4 cases and backends of the baseline not run by this narrowed run (`-k mlp`): not compared" in text
    whole = compare(run(ran), run(BASELINE))
    assert len(whole.changes) == 4 and all(change.after == "not run" for change in whole.changes)
    assert whole.left_out == 0 and len(whole.removed) == 4
    store = tmp_path / "store"
    assert hold_to_baseline("cpu", reports(tmp_path / "whole", BASELINE), named=None, store=store, trusted=True) == 0
    subset = reports(tmp_path / "subset", ran)
    assert hold_to_baseline("cpu", subset, named=None, store=store, trusted=True, keep=False, narrowed="-k mlp") == 0
    written = json.loads((subset / "parity.json").read_text())
    assert written["changes"]["left_out"] == 4 and written["changes"]["changes"] == []
