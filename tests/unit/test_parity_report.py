"""The parity reports the in-image side writes (parity.md, parity.json): what they name, count and time."""

from __future__ import annotations

import json
from pathlib import Path

from torchyard.inimage.report import diverges_in_brief, self_test_line, write_reports
from torchyard.inimage.start.loadavg import machine_load, sample


def test_the_parity_reports_name_the_suites_that_ran(tmp_path: Path) -> None:
    """A run narrowed with `--suite` says so wherever its verdicts are read: a report that looks whole
    would pass for a run of every suite."""
    manifest = {"accelerator": "cuda", "device": "NVIDIA H200", "torch": "2.11.0", "trust": "untrusted"}
    paths = write_reports(tmp_path, [], manifest, {"suites": ["export", "parity"]})
    title = paths["markdown"].read_text().splitlines()[0]
    assert title == "### torchyard parity: cuda on NVIDIA H200, torch 2.11.0, untrusted run; suites: export, parity"
    assert json.loads(paths["json"].read_text())["suites"] == ["export", "parity"]
    finished = {"suites": ["train"], "finished": "2026-12-05T02:03:09+00:00"}
    title = write_reports(tmp_path, [], manifest, finished)["markdown"].read_text().splitlines()[0]
    assert title.endswith("untrusted run; suites: train; finished 2026-12-05 02:03:09 UTC")


def _record(case: str, backend: str, suite: str, latency: float | None) -> dict[str, object]:
    return {"case": case, "backend": backend, "suite": suite, "outcome": "passed", "latency_ms": latency}


def test_train_steps_are_timed_against_the_eager_step_with_their_optimizer(tmp_path: Path) -> None:
    records = [
        _record("mlp", "train-inductor-adamw", "train", 2.0),
        _record("mlp", "eager", "parity", 1.0),
        _record("mlp", "train-eager-sgd", "train", 4.0),
        _record("mlp", "inductor", "compile", 0.5),
        _record("mlp", "train-inductor-sgd:max-autotune", "train", 1.0),
        _record("mlp", "train-eager-adamw", "train", 3.0),
        _record("conv", "train-eager-sgd", "train", 1.0),
        _record("conv", "eager", "parity", 2.0),
    ]
    paths = write_reports(tmp_path, records, {"accelerator": "cpu"}, {})
    speed = json.loads(paths["json"].read_text())["speed"]["mlp"]
    assert speed["inductor"]["speedup"] == 2.0  # over eager inference
    assert speed["train-inductor-adamw"]["speedup"] == 1.5  # over the eager AdamW step, not over inference
    assert speed["train-inductor-sgd:max-autotune"]["speedup"] == 4.0
    assert speed["train-eager-sgd"]["speedup"] == 1.0
    text = paths["markdown"].read_text()
    inference, _, training = text.partition("#### Training speed")
    assert "train-" not in inference.split("#### Speed")[1]  # the inference table has inference columns only
    (mlp,) = [" ".join(line.split()) for line in training.splitlines() if line.startswith("| mlp ")]
    assert mlp == "| mlp | 4.000 (1.00x) | 3.000 (1.00x) | 2.000 (1.50x) | 1.000 (4.00x) |"
    # A case's inference and training rows stand together in the verdict table.
    cases = [line.split("|")[1].strip() for line in text.split("#### Speed")[0].splitlines() if line.startswith("| ")]
    assert cases[1:] == ["conv", "conv", "mlp", "mlp", "mlp", "mlp", "mlp", "mlp"]


def _result(case: str, backend: str, suite: str, outcome: str, reason: str = "", **fields: object) -> dict[str, object]:
    return {"case": case, "backend": backend, "suite": suite, "outcome": outcome, "reason": reason, **fields}


def test_the_markdown_opens_with_counts_then_the_failures_and_known_failures(tmp_path: Path) -> None:
    """276 rows read at a glance only with a summary first: counts by outcome, then each failure and known
    failure on its own line with its whole reason; every row follows."""
    long_reason = "expected the known failure UserError matching 'Eq(u0, 1)', got error: " + "x" * 300
    records = [
        _result("mlp", "eager", "parity", "passed"),
        _result("conv", "executorch-portable", "runtime", "xfailed", "upstream issue #123 [observed: 0x12]"),
        _result("guarded", "export", "export", "failed", long_reason),
        _result("mlp", "tensorrt", "parity", "skipped", "Torch-TensorRT needs an NVIDIA CUDA device"),
    ]
    lines = write_reports(tmp_path, records, {"accelerator": "cpu"}, {})["markdown"].read_text().splitlines()
    assert lines[1:6] == [
        "",
        "**1 pass, 1 FAIL, 1 skip, 1 known failure** (4 results)",
        "",
        f"- FAIL: `guarded` on export (export): {long_reason}",
        "- known failure: `conv` on executorch-portable (runtime): upstream issue #123 [observed: 0x12]",
    ]
    rows = [line for line in lines if line.startswith("| ") and "(median" not in line]
    # The header, and every result but a backend skipped for every case for one reason: one line for it.
    assert len(rows) == 1 + len(records) - 1
    assert "- `tensorrt` skipped for every case (1 results): Torch-TensorRT needs an NVIDIA CUDA device" in lines
    assert "cache" in rows[0].split("|")[11]
    (guarded,) = [row for row in rows if row.startswith("| guarded ")]
    assert "x" * 40 + "... (whole in parity.json)" in guarded and long_reason not in guarded


def test_the_summary_says_why_pytests_count_is_not_the_results(tmp_path: Path) -> None:
    """pytest counts tests; parity.md counts results, and a run's self-tests and the project's own tests make
    none: the summary line says what pytest's count holds besides them."""
    records = [_result("mlp", "eager", "parity", "passed"), _result("mlp", "export", "export", "passed")]
    tests = {"with-results": 2, "self-tests": 9, "others": 3}
    text = write_reports(tmp_path, records, {}, {"pytest-tests": tests})["markdown"].read_text()
    assert (
        "**2 pass** (2 results); of the 14 tests pytest counts, 2 made these results, 9 are harness self-tests, "
        "3 are tests of the project's own\n"
    ) in text
    only = write_reports(tmp_path, records, {}, {"pytest-tests": {"with-results": 2, "self-tests": 0, "others": 0}})
    assert "**2 pass** (2 results)\n" in only["markdown"].read_text()  # nothing to explain


def test_the_reference_and_the_cache_say_what_qualifies_a_row(tmp_path: Path) -> None:
    effective = "float64 on cpu (float32 in effect: eager in float32 equals it exactly)"
    why = "no source for 'doubled' in model (code made at run time, by exec or in a notebook, has none)"
    records = [
        _result("vq", "export", "export", "passed", reference=effective, cache="hit"),
        _result("notebook", "export", "export", "passed", reference="float64 on cpu", cache="unkeyable", cache_why=why),
    ]
    text = write_reports(tmp_path, records, {"accelerator": "cpu"}, {})["markdown"].read_text()
    assert f"- reference for `vq`: {effective}\n" in text
    assert f"- artifact cache not used for `notebook` (export): {why}\n" in text
    (vq,) = [line.split("|") for line in text.splitlines() if line.startswith("| vq ")]
    assert [vq[8].strip(), vq[11].strip()] == ["float64 on cpu (float32 in effect)", "hit"]


def test_machine_load_decides_whether_speed_figures_stand() -> None:
    """Others' work is what ran before the run (its start's 1-minute load) or beside it (its end's, less its
    own workers); with the run's workers it must fit the CPUs."""
    quiet = machine_load([0.4, 0.5, 0.5], [1.3, 0.9, 0.6], cpus=2, workers=1)
    assert (quiet["loaded"], quiet["others"]) == (False, 0.4)
    shared = machine_load([5.13, 5.55, 4.08], [5.9, 5.6, 4.5], cpus=2, workers=1)
    assert (shared["loaded"], shared["others"]) == (True, 5.13)
    assert shared["why"] == (
        "other work averaged 5.1 runnable processes beside this run's 1 on 2 CPUs "
        "(1-minute load average 5.13 at the start, 5.90 at the end)"
    )
    assert machine_load([0.0, 0.0, 0.0], [3.9, 1.0, 0.4], cpus=4, workers=2)["loaded"] is False  # its own 2, and 1.9
    assert machine_load([0.0, 0.0, 0.0], [4.5, 1.0, 0.4], cpus=4, workers=2)["loaded"] is True  # 2.5 others + 2 > 4
    assert machine_load(None, None, cpus=2, workers=1)["loaded"] is None
    assert sample(lambda: (1.234, 2.0, 3.0)) == [1.23, 2.0, 3.0]


def test_a_loaded_machines_speedups_are_withheld(tmp_path: Path) -> None:
    records = [_record("mlp", "eager", "parity", 2.0), _record("mlp", "inductor", "compile", 0.0034)]
    loaded = {"accelerator": "cpu", "load": machine_load([5.1, 5.0, 4.0], [5.5, 5.0, 4.0], cpus=2, workers=1)}
    text = write_reports(tmp_path / "loaded", records, loaded, {})["markdown"].read_text()
    assert "- speed: the machine was loaded, so speedups are withheld and latencies are upper bounds: " in text
    (row,) = [" ".join(line.split()) for line in text.split("#### Speed")[1].splitlines() if line.startswith("| mlp")]
    assert row == "| mlp | 2.000 | 0.003 |"  # not 588x
    quiet = {"accelerator": "cpu", "load": machine_load([0.2, 0.2, 0.2], [1.0, 0.5, 0.3], cpus=2, workers=1)}
    text = write_reports(tmp_path / "quiet", records, quiet, {})["markdown"].read_text()
    assert "588.24x" in text and "- speed:" not in text


def _error(problem: str, scaled: float, rel_l2: float) -> dict[str, object]:
    return {"problem": problem, "scaled_max_error": scaled, "rel_l2_error": rel_l2, "passed": not problem}


def test_a_failure_says_where_it_diverges_under_its_line(tmp_path: Path) -> None:
    """The localization a failing result carries (`parity.localize`) reads under its line of the summary: the
    node, its operator, its source line, its delegate and error, then its inputs' errors; parity.json keeps it."""
    node = {
        "node": "gelu",
        "operator": "aten.gelu.default",
        "source": "builtin.py:61 in forward",
        "delegate": "XnnpackBackend (delegated subgraph)",
        "error": _error("relative L2 error 0.000163 > 1e-05", 7.9e-05, 0.000163),
        "inputs": [{"node": "linear", **_error("", 8.7e-08, 6.7e-08)}],
    }
    diverges = {"backend": "executorch-xnnpack", "node": node, "compared": 2, "seconds": 1.25, "note": "", "pass": ""}
    bisected = {"backend": "inductor", "node": None, "compared": 0, "seconds": 7.5, "note": "",
                "pass": "inductor: post_grad_passes, post_grad_custom_post_pass (application 9)"}  # fmt: skip
    records = [
        _result("gelu_tanh", "executorch-xnnpack", "parity", "failed", "output : relative L2", diverges=diverges),
        _result("mlp", "inductor", "parity", "failed", "output : relative L2", diverges=bisected),
        _result("gelu_tanh", "executorch-xnnpack", "compile", "passed", diverges=diverges),
        _result("gelu_tanh", "executorch-xnnpack", "parity", "xfailed", "known at its node", diverges=diverges),
    ]  # fmt: skip
    paths = write_reports(tmp_path, records, {"accelerator": "cpu"}, {})
    lines = paths["markdown"].read_text().splitlines()
    at = lines.index("- FAIL: `gelu_tanh` on executorch-xnnpack (parity): output : relative L2")
    assert lines[at + 1 : at + 3] == [
        "  - where it diverges: node `gelu` (aten.gelu.default) at builtin.py:61 in forward, run by XnnpackBackend "
        "(delegated subgraph): relative L2 error 0.000163 > 1e-05 (1.2 s, 2 nodes compared)",
        "    - its inputs, within the bounds: `linear` (scaled max err 8.7e-08, rel L2 6.7e-08)",
    ]
    at = lines.index("- FAIL: `mlp` on inductor (parity): output : relative L2")
    assert lines[at + 1] == (
        "  - where it diverges: inductor: post_grad_passes, post_grad_custom_post_pass (application 9) "
        "(torch's compiler bisector, 7.5 s)"
    )
    at = lines.index("- known failure: `gelu_tanh` on executorch-xnnpack (parity): known at its node")
    assert lines[at + 1].startswith("  - where it diverges: node `gelu` (aten.gelu.default) at builtin.py:61")
    assert sum("where it diverges" in line for line in lines) == 3  # not under the passing compile row
    results = json.loads(paths["json"].read_text())["results"]
    assert results[0]["diverges"]["node"]["node"] == "gelu"
    # The failing test's own line ends with it too.
    assert diverges_in_brief(diverges) == "; diverges first at node gelu (aten.gelu.default, builtin.py:61 in forward)"
    assert diverges_in_brief(bisected).startswith("; diverges at inductor: post_grad_passes")
    assert diverges_in_brief({**diverges, "node": None, "note": "gave up after 61 s"}) == ""


def test_the_self_test_line_says_what_was_left_out_and_why() -> None:
    proven = {"ran": 3, "failed": 0, "left-out": 5, "proven-by": "2026-12-04T22:00:00Z"}
    other = {"left-out": 14, "suites": ["ops"]}
    assert self_test_line({**proven, "other-suites": other}) == (
        "Harness self-tests: 3 ran; 5 left out, proven on this stack by the run of 2026-12-04T22:00:00Z "
        "(`torchyard test --rerun-self-tests` runs them); 14 left out, of suites this run does not have (ops).\n\n"
    )
    none_other = {**proven, "left-out": 0, "other-suites": {"left-out": 0, "suites": []}}
    assert self_test_line(none_other) == "Harness self-tests: 3 ran.\n\n"


def test_a_failed_self_test_is_named_where_the_summary_is_read() -> None:
    """The run fails for a failed self-test whatever the results say: parity.md names it (an adopter read
    '56 pass' and an exit status of 1, and found the test only in junit.xml)."""
    failed = {"ran": 2, "failed": 1, "failed-tests": ["test_options.py::test_x"], "left-out": 0}
    assert self_test_line(failed) == (
        "Harness self-tests: 2 ran, 1 failed, which fails the run (`test_options.py::test_x`; junit.xml has each "
        "one's traceback).\n\n"
    )


def test_a_backend_skipped_for_some_cases_only_keeps_its_rows(tmp_path: Path) -> None:
    records = [
        _result("mlp", "tensorrt", "parity", "skipped", "Torch-TensorRT needs an NVIDIA CUDA device"),
        _result("conv", "tensorrt", "parity", "skipped", "case applies to inductor only"),
        _result("mlp", "eager", "parity", "passed"),
    ]
    text = write_reports(tmp_path, records, {}, {})["markdown"].read_text()
    assert "skipped for every case" not in text and "| conv | tensorrt |" in " ".join(text.split())
    assert "`cache`: what the artifact cache did with a saved program" in text


def test_replayed_results_are_counted_and_marked_where_their_verdicts_are_read(tmp_path: Path) -> None:
    records = [
        _result("mlp", "eager", "parity", "passed", replayed="2026-12-06T09:10:00+00:00"),
        _result("mlp", "inductor", "parity", "passed", replayed="2026-12-05T08:00:00+00:00"),
        _result("conv", "eager", "parity", "passed"),
    ]
    text = write_reports(tmp_path, records, {"accelerator": "cpu"}, {})["markdown"].read_text()
    assert (
        "**Replayed**: 2 of 3 results, kept by earlier runs in which they passed; nothing that decides them has "
        "changed since (the oldest evaluated 2026-12-05 08:00:00 UTC)" in text
    )
    rows = {line.split("|")[1].strip() + line.split("|")[2].strip(): line for line in text.splitlines() if "| " in line}
    assert "pass, replayed" in rows["mlpinductor"] and "replayed" not in rows["conveager"]
    fresh = write_reports(tmp_path, records[2:], {"accelerator": "cpu"}, {})["markdown"].read_text()
    assert "Replayed" not in fresh
