"""`torchyard report`: runs' parity.json merged into one table, rendered as Markdown and HTML."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from torchyard import cli, opsfile
from torchyard.commands.report import report
from torchyard.errors import UsageError
from torchyard.reports import html, markdown, render
from torchyard.reports.merge import CompatibilityTable, merge
from torchyard.reports.ops import OpsTable, ops_table


def result(case: str, backend: str, outcome: str, reason: str = "", **extra: Any) -> dict[str, Any]:
    return {"case": case, "backend": backend, "outcome": outcome, "reason": reason, "suite": "parity", **extra}


def write_run(folder: Path, results: list[dict[str, Any]], torch: str = "2.14.1") -> Path:
    folder.mkdir(parents=True)
    data = {"environment": {"accelerator": "cpu", "torch": torch}, "precision": "fp32", "results": results}
    (folder / "parity.json").write_text(json.dumps(data))
    return folder


@pytest.fixture
def two_runs(tmp_path: Path) -> list[Path]:
    current = write_run(
        tmp_path / "reports" / "cpu",
        [
            result("mlp", "eager", "passed"),
            result("mlp", "executorch-xnnpack", "passed"),
            result("mlp", "export", "passed"),
            result("mlp", "export", "failed", "output [0]: relative L2 error 2e-3 > 1e-05"),  # a second suite's
            result("rotary", "executorch-portable", "xfailed", "SpecViolationError (known)"),
        ],
    )
    older = write_run(
        tmp_path / "artifacts" / "reports-cpu-old",
        [result("mlp", "eager", "passed"), result("act", "inductor", "skipped", "not in this image")],
        torch="2.11.0",
    )
    return [current, older]


def test_runs_merge_with_each_cell_showing_its_worst_outcome(two_runs: list[Path]) -> None:
    table = merge(two_runs)
    assert [run.name for run in table.runs] == ["cpu", "cpu-old"]
    assert table.runs[0].backends == ["eager", "export", "executorch-portable", "executorch-xnnpack"]
    assert table.cases == ("act", "mlp", "rotary")
    export = table.cell("cpu", "mlp", "export")
    assert export.outcome == "failed" and export.reason.startswith("output [0]: relative L2")
    assert table.cell("cpu", "rotary", "executorch-portable").outcome == "xfailed"
    assert table.cell("cpu-old", "mlp", "export").outcome == "none"  # not run there


def test_markdown_has_a_column_group_per_run(two_runs: list[Path]) -> None:
    text = markdown.render(merge(two_runs))
    assert (
        "| case | cpu eager | cpu export | cpu executorch-portable | cpu executorch-xnnpack | cpu-old eager |" in text
    )
    assert "| `mlp` | ✅ | ❌ failed |  | ✅ | ✅ |" in text.replace("cpu-old inductor | ", "")
    assert "- **cpu-old**: `fp32; accelerator cpu, torch 2.11.0" in text


def test_a_runs_line_names_each_backends_first_distribution(tmp_path: Path) -> None:
    run = write_run(tmp_path / "cuda", [result("mlp", "eager", "passed")])
    data = json.loads((run / "parity.json").read_text())
    versions = {"executorch": "1.5.1", "torchao": "0.18.0", "torch_tensorrt": "2.14.0", "tensorrt": "10.13.3.9"}
    data["environment"] |= {**versions, "device": "NVIDIA H200"}
    (run / "parity.json").write_text(json.dumps(data))
    line = "accelerator cpu, torch 2.14.1, executorch 1.5.1, torch_tensorrt 2.14.0, device NVIDIA H200"
    assert f"- **cuda**: `fp32; {line}`" in markdown.render(merge([run]))


def test_each_run_says_when_it_finished_where_its_report_says_so_in_the_harness_words(tmp_path: Path) -> None:
    """A stale run beside today's is told apart by its day; a `finished` that is not the harness's timestamp (a run
    of other people's code wrote the file) is left out, not shown."""
    folders = []
    odd = ["**bold** [link](x)", "2026-13-40T09:15:02+00:00", "\u0662\u0660\u0662\u0666-11-30T09:15:02+00:00"]
    runs = [("old", "2026-11-30T09:15:02+00:00"), *[(f"odd{n}", text) for n, text in enumerate(odd)], ("none", None)]
    for name, finished in runs:
        folders.append(write_run(tmp_path / name, [result("mlp", "eager", "passed")]))
        if finished is not None:
            data = json.loads((folders[-1] / "parity.json").read_text())
            (folders[-1] / "parity.json").write_text(json.dumps({**data, "finished": finished}))
    table = merge(folders)
    lines = [line for line in markdown.render(table).splitlines() if line.startswith("- **")]
    assert lines[0].endswith("; finished 2026-11-30 09:15:02 UTC`")
    assert len(lines) == 5 and not any("finished" in line or "bold" in line for line in lines[1:]), lines
    assert "; finished 2026-11-30 09:15:02 UTC</li>" in html.render(table)


def test_html_links_each_cell_to_its_details_and_escapes_what_a_run_wrote(tmp_path: Path) -> None:
    hostile = write_run(
        tmp_path / "evil",
        [result("<img src=x onerror=alert(1)>", "eager", "failed", "</td><script>alert(2)</script>",
                error_message="<b>boom</b>", comparisons=[{"output": "<i>", "problem": "&"}])],
    )  # fmt: skip
    page = html.render(merge([hostile]))
    assert "<script>alert" not in page and "<img src=x" not in page and "<b>boom" not in page
    assert "&lt;img src=x onerror=alert(1)&gt;" in page and "&lt;b&gt;boom&lt;/b&gt;" in page
    assert '<a href="#r0">' in page and '<section class="detail" id="r0">' in page


def test_a_failed_cells_details_say_where_it_diverges(tmp_path: Path) -> None:
    error = {"problem": "relative L2 error 4.7e-04 > 1e-05", "scaled_max_error": 1.0, "rel_l2_error": 4.7e-4}
    node = {
        "node": "gelu", "operator": "aten.gelu.default", "source": "builtin.py:61 in forward",
        "delegate": "XnnpackBackend (delegated subgraph)", "error": error,
        "inputs": [{"node": "<linear>", "scaled_max_error": 0.0, "rel_l2_error": 0.0}],
    }  # fmt: skip
    run = write_run(
        tmp_path / "cpu",
        [
            result("gelu_tanh", "executorch-xnnpack", "failed", "output [0]: relative L2 error",
                   diverges={"node": node, "compared": 4, "seconds": 2.5, "note": "", "pass": ""}),
            result("deep", "inductor", "failed", "wrong",
                   diverges={"node": None, "compared": 0, "seconds": 9.0, "note": "", "pass": "inductor: post_grad"}),
        ],
    )  # fmt: skip
    page = html.render(merge([run]))
    assert (
        '<p class="diverges"><b>Where it diverges</b>: node <code>gelu</code> (aten.gelu.default) at builtin.py:61 in '
        "forward, run by XnnpackBackend (delegated subgraph): relative L2 error 4.7e-04 &gt; 1e-05 (2.5 s, 4 nodes "
        "compared); its inputs, within the bounds: <code>&lt;linear&gt;</code></p>"
    ) in page
    assert "<b>Where it diverges</b>: inductor: post_grad (torch's compiler bisector, 9.0 s)" in page
    assert 'title="output [0]: relative L2 error; diverges first at node gelu (aten.gelu.default)"' in page


def test_two_runs_of_one_name_are_numbered(tmp_path: Path) -> None:
    first = write_run(tmp_path / "a" / "cpu", [result("mlp", "eager", "passed")])
    second = write_run(tmp_path / "b" / "reports-cpu", [result("mlp", "eager", "failed")])
    assert [run.name for run in merge([first, second]).runs] == ["cpu", "cpu (2)"]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", "not a readable parity.json (JSONDecodeError)"),
        ('{"results": 3}', "no results with a case and a backend"),
        ('[{"case": "x"}]', "no results with a case and a backend"),
        ('{"results": [{"case": "x", "backend": 1}]}', "no results with a case and a backend"),
    ],
)
def test_a_file_that_is_not_a_report_is_one_line(tmp_path: Path, content: str, message: str) -> None:
    (tmp_path / "parity.json").write_text(content)
    with pytest.raises(UsageError, match=re.escape(message)):
        merge([tmp_path])


def test_nothing_to_merge_says_where_it_looked(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"no parity\.json under"):
        merge([tmp_path])
    with pytest.raises(UsageError, match="no such file or folder"):
        merge([tmp_path / "missing"])


def test_the_command_writes_both_files_and_the_step_summary(
    two_runs: list[Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    summary = tmp_path / "summary.md"
    summary.write_text("")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    out = tmp_path / "out"
    args = ["report", *map(str, two_runs), "--markdown", str(out / "compat.md"), "--html", str(out / "compat.html")]
    assert cli.main(args) == 0
    assert (out / "compat.md").read_text() in summary.read_text()
    assert (out / "compat.html").read_text().startswith("<!DOCTYPE html>")
    assert capsys.readouterr().out == ""  # the Markdown went to its file
    assert cli.main(["report", str(tmp_path / "missing")]) == 2
    assert "torchyard: report:" in capsys.readouterr().err


def test_a_format_is_its_renderer_and_its_row(
    two_runs: list[Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 59: a report format took a renderer in two modules and its flag in two more. A row of
    `render.FORMATS` is its flag (`--<name> FILE`) and its renderer; the command writes what it renders."""

    def cases(table: CompatibilityTable, ops: OpsTable | None) -> str:
        return "\n".join(table.cases) + "\n"

    monkeypatch.setattr(render, "FORMATS", (*render.FORMATS, render.Format("cases", "the cases, a line each", cases)))
    out = tmp_path / "cases.txt"
    assert cli.main(["report", *map(str, two_runs), "--cases", str(out)]) == 0
    assert out.read_text() == "\n".join(merge(two_runs).cases) + "\n"
    assert "## Compatibility" in capsys.readouterr().out  # no file took the Markdown: stdout has it


def outcome(operator: str, sample: int, backend: str, found: str, detail: str = "", **metrics: float) -> dict[str, Any]:
    return {"operator": operator, "sample": sample, "backend": backend, "outcome": found, "detail": detail,
            "metrics": metrics}  # fmt: skip


def write_sweep(folder: Path, outcomes: list[dict[str, Any]], torch: str, **set_aside: str) -> Path:
    """An ops entry's reports: a parity.json with no case, and its ops.json."""
    folder.mkdir(parents=True)
    data = {"environment": {"accelerator": "cpu", "torch": torch}, "precision": "fp32", "results": []}
    (folder / "parity.json").write_text(json.dumps(data))
    backends = sorted({item["backend"] for item in outcomes})
    sweep = {"stack": {"torch": torch}, "backends": backends, "outcomes": outcomes, "set_aside": set_aside}
    (folder / "ops.json").write_text(json.dumps(sweep))
    return folder


@pytest.fixture
def two_sweeps(tmp_path: Path) -> list[Path]:
    new = write_sweep(
        tmp_path / "ops-new",
        [
            outcome("add", 0, "export", "passed"),
            outcome("gelu", 0, "executorch-xnnpack", "passed"),
            outcome("gelu", 1, "executorch-xnnpack", "wrong value", "<b>off</b>", scaled_max_error=1.7),
            outcome("narrow", 0, "executorch-xnnpack", "crashed", "SIGABRT"),
        ],
        "2.14.1",
        bernoulli="random: its values are drawn at random",
    )
    old = write_sweep(
        tmp_path / "ops-old",
        [
            outcome("add", 0, "export", "passed"),
            outcome("gelu", 0, "executorch-xnnpack", "passed"),
            outcome("gelu", 1, "executorch-xnnpack", "passed"),
            outcome("narrow", 0, "executorch-xnnpack", "crashed", "SIGABRT"),
        ],
        "2.11.0",
    )
    return [new, old]


def test_two_sweeps_name_the_operators_whose_outcome_changed(two_sweeps: list[Path]) -> None:
    table = merge(two_sweeps)
    ops = ops_table([(run.name, run.source) for run in table.runs])
    assert ops is not None
    assert ops.operators == ("add", "bernoulli", "gelu", "narrow")
    assert ops.outcome("ops-new", "gelu", "executorch-xnnpack") == "wrong value"  # the worst of its samples
    assert ops.outcome("ops-new", "bernoulli", "export") == "set aside"
    assert [name for name in ops.operators if ops.differs(name)] == ["gelu"]  # narrow crashes in both: unchanged
    text = markdown.render(table, ops)
    assert "### Operators whose outcome differs between runs: 1" in text
    assert "| `gelu` | wrong |  | pass |  |" in text  # blank: not swept on that backend
    assert "| ops-new | executorch-xnnpack | 1 | 1 | 0 |" in text  # by operator: gelu wrong, narrow crashed
    assert "## Compatibility" in text and "| case |" not in text  # no case in either run: no cases' table


def test_the_op_table_lists_what_changed_first_and_escapes_what_a_run_wrote(two_sweeps: list[Path]) -> None:
    table = merge(two_sweeps)
    page = html.render(table, ops_table([(run.name, run.source) for run in table.runs]))
    rows = re.findall(r'<tr class="(differs|same)"><td class="case">([^<]+)</td>', page)
    assert rows[0] == ("differs", "gelu") and {name for _, name in rows[1:]} == {"add", "bernoulli", "narrow"}
    assert "<b>off</b>" not in page and "&lt;b&gt;off&lt;/b&gt;" in page
    assert "sample 1: wrong value (scaled max error 1.7)" in page


def test_one_sweep_lists_the_operators_that_did_not_pass(tmp_path: Path) -> None:
    outcomes = [outcome("add", 0, "export", "passed"), outcome("sum", 1, "export", "failed to export", "guard")]
    folder = write_sweep(tmp_path / "ops", outcomes, "2.14.1")
    table = merge([folder])
    text = markdown.render(table, ops_table([(run.name, run.source) for run in table.runs]))
    assert "### Operators that did not pass: 1" in text and "| `sum` | export |" in text


@pytest.mark.parametrize(
    "content",
    ['{"outcomes": [{"operator": "add", "sample": 0, "backend": "export", "outcome": "exploded"}]}', "[]", "{"],
)
def test_an_ops_file_that_is_not_one_is_one_line(tmp_path: Path, content: str) -> None:
    folder = write_sweep(tmp_path / "ops", [outcome("add", 0, "export", "passed")], "2.14.1")
    (folder / "ops.json").write_text(content)
    with pytest.raises(UsageError, match=r"ops\.json"):
        ops_table([(run.name, run.source) for run in merge([folder]).runs])


def test_a_run_with_neither_cases_nor_a_sweep_is_still_not_a_report(tmp_path: Path) -> None:
    folder = write_run(tmp_path / "empty", [])
    with pytest.raises(UsageError, match="no results with a case and a backend"):
        merge([folder])


def test_a_stacks_shards_are_one_run_on_the_op_table(tmp_path: Path) -> None:
    shards = [
        write_sweep(tmp_path / f"reports-ops-shard-{k}", [outcome(name, 0, "export", "passed")], "2.14.1")
        for k, name in ((1, "add"), (2, "mul"))
    ]
    for k, folder in enumerate(shards, start=1):
        data = json.loads((folder / "ops.json").read_text())
        (folder / "ops.json").write_text(json.dumps({**data, "shard": [k, 2]}))
    alone = write_sweep(tmp_path / "reports-ops-shard-9", [outcome("sum", 0, "export", "passed")], "2.14.1")
    ops = ops_table([(run.name, run.source) for run in merge([*shards, alone]).runs])
    assert ops is not None
    assert [sweep.run for sweep in ops.sweeps] == ["ops", "ops-shard-9"]  # one unsharded run keeps its name
    assert ops.outcome("ops", "add", "export") == ops.outcome("ops", "mul", "export") == "passed"


def test_a_sharded_sweeps_expectations_are_the_unsharded_ones(tmp_path: Path) -> None:
    """`report --ops-expectations` writes what `--collect-expectations` writes from one unsharded run (the same
    renderer), from the shards put back together; a missing shard writes nothing and says which."""
    stack = {"accelerator": "cpu", "precision": "fp32", "torch": "2.14.1", "executorch": "1.5.1", "samples": "2"}
    slices = {
        1: ([outcome("add", 0, "export", "passed"), outcome("sum", 1, "executorch-portable", "crashed", "SIGABRT")],
            {"bernoulli": "random"}),
        2: ([outcome("gelu", 0, "executorch-xnnpack", "wrong value", "scaled max error 0.00017 > 0.0001")],
            {"gelu#2": "random: dropout"}),
    }  # fmt: skip
    for k, (outcomes, aside) in slices.items():
        folder = write_sweep(tmp_path / f"ops-shard-{k}", outcomes, "2.14.1", **aside)
        data = json.loads((folder / "ops.json").read_text())
        (folder / "ops.json").write_text(json.dumps({**data, "stack": stack, "shard": [k, 2]}))
    written = tmp_path / "expectations"
    report([tmp_path / "ops-shard-1", tmp_path / "ops-shard-2"], ops_expectations=written, env={})
    every = [row for outcomes, _ in slices.values() for row in outcomes]
    rows = [(item["operator"], item["sample"], item["backend"], item["outcome"], item["detail"]) for item in every]
    aside = {"bernoulli": "random", "gelu#2": "random: dropout"}
    assert (written / "cpu-fp32-torch2.14.1-executorch1.5.1.toml").read_text() == opsfile.render(stack, aside, rows)
    assert '"executorch-portable" = { outcome = "crashed", detail = "SIGABRT" }' in opsfile.render(stack, aside, rows)
    with pytest.raises(UsageError, match=r"^report: ops: shard 2 of 2 missing; an expectations file needs every"):
        report([tmp_path / "ops-shard-1"], ops_expectations=tmp_path / "none", env={})
    assert not (tmp_path / "none").exists()


@pytest.mark.parametrize("accelerator", ["../../outside", "/etc/cron.d/x", ".hidden", ""])
def test_a_stack_that_would_name_a_path_writes_no_expectations(tmp_path: Path, accelerator: str) -> None:
    """The stack in an ops.json is the run's writing: a name outside the folder is refused, nothing written."""
    folder = write_sweep(tmp_path / "ops", [outcome("add", 0, "export", "passed")], "2.14.1")
    data = json.loads((folder / "ops.json").read_text())
    stack = {"accelerator": accelerator, "precision": "fp32", "torch": "2.14.1"}
    (folder / "ops.json").write_text(json.dumps({**data, "stack": stack}))
    with pytest.raises(UsageError, match=r"^report: ops: its ops.json's stack names no expectations file"):
        report([folder], ops_expectations=tmp_path / "out", env={})
    assert not (tmp_path / "out").exists() and not (tmp_path / "outside-fp32-torch2.14.1.toml").exists()
