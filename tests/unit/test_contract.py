"""The settings table (`contract.SETTINGS`) is the one place a setting that crosses into the image is defined:
tied to the entry's fields, to every variable the contract names, and to the replay fingerprint."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import fields
from pathlib import Path

import pytest

from tests.unit.matrix_text import VALID
from torchyard import contract
from torchyard.contract import SETTINGS, RunOptions, Values, setting
from torchyard.inimage.start import replay
from torchyard.matrix import parse_plan
from torchyard.matrix.schema import Entry
from torchyard.run.environment import entry_environment

INIMAGE = Path(contract.__file__).parent / "inimage"

# The entry's fields that stay on the host: what the image is built from, how the run is bounded and sealed. The
# project's tests cross too, but as pytest's arguments (`contract.pytest_args`), not as a setting.
HOST_ONLY = {
    "name",
    "fail_on_change",
    "python",
    "requirements",
    "exclude",
    "exclude_newer",
    "project",
    "tests",
    "network",
    "timeout",
    "lock_on_runner",
}


def test_each_entry_field_crosses_as_a_setting_or_stays_on_the_host() -> None:
    entry_fields = {field.name for field in fields(Entry)} - {"options"}
    entry_fields |= {field.name for field in fields(RunOptions)}  # each crosses: its row is made from it
    crossing = {row.field for row in SETTINGS if row.field is not None}
    assert crossing <= entry_fields, f"not fields of Entry: {sorted(crossing - entry_fields)}"
    assert entry_fields - crossing == HOST_ONLY, "a new Entry field: add its row to contract.SETTINGS, or here"


def test_every_variable_the_contract_names_is_a_setting() -> None:
    named = {value for value in vars(contract).values() if isinstance(value, str) and value.startswith("TORCHYARD_")}
    named |= {row.variable for row in contract.ENTRY_OPTIONS}  # named by their fields
    assert named == {row.variable for row in SETTINGS}
    assert len(SETTINGS) == len(named)  # one row each
    # The in-image side (its self-tests aside, which plant variables of their own) names them by the contract.
    spelled = [
        path.name
        for path in INIMAGE.rglob("*.py")
        if not path.name.startswith("test_") and "TORCHYARD_" in path.read_text(encoding="utf-8")
    ]
    assert not spelled


def test_the_run_environment_carries_each_setting_an_entry_gives() -> None:
    cuda = parse_plan(VALID, Path("matrix.toml")).entry("cuda")
    assert entry_environment(cuda, "/reports") == {
        "PYTHONHASHSEED": "0",  # a model's state made by iterating a set is the same every run: so is its key
        contract.ACCELERATOR: "cuda",
        contract.PRECISION: "fp32",
        contract.REPORT_DIR: "/reports",
        contract.SUITES: "export,parity",
        contract.TOLERANCES: json.dumps(
            {
                "float32.inductor": {
                    "max-rel-l2": None,
                    "max-scaled-error": 1e-4,
                    "min-cosine": 0.9999,
                    "noise-factor": None,
                }
            },
            sort_keys=True,
        ),
        contract.CASES: "",
        # The entry's options (none set: their defaults), each by its row (`test_an_entry_option_is_declared_once`).
        **{row.variable: row.default for row in contract.ENTRY_OPTIONS},
    }


def test_the_image_reads_back_what_the_host_wrote() -> None:
    options = RunOptions(
        tests_markers="not slow",
        tests_keyword="not dtw",
        builtin_cases=False,
        compile_modes=("default", "max-autotune"),
        ops_operators="nn.functional.gelu,add",
        ops_samples=4,
        localize_seconds=300,
    )
    written = contract.suite_environment(
        {
            "accelerator": "cpu",
            "precision": "bf16",
            "suites": ("export", "parity"),
            "tolerances": {"float32.export": {"max-rel-l2": 1.0}},
            "cases": ("mypkg.cases", "other:CASES"),
        },
        options,
        report_dir="/r",
    )
    read = Values(written)
    assert read.text("TORCHYARD_TESTS_MARKERS") == "not slow" and read.text("TORCHYARD_TESTS_KEYWORD") == "not dtw"
    assert (
        read.text("TORCHYARD_OPS_OPERATORS") == "nn.functional.gelu,add" and read.text("TORCHYARD_OPS_SAMPLES") == "4"
    )
    assert read.text("TORCHYARD_LOCALIZE_SECONDS") == "300"
    assert read.text(contract.PRECISION) == "bf16" and read.text(contract.REPORT_DIR) == "/r"
    assert read.items(contract.SUITES) == ("export", "parity")
    assert read.items(contract.CASES) == ("mypkg.cases", "other:CASES")
    assert read.items("TORCHYARD_COMPILE_MODES") == ("default", "max-autotune")
    assert read.enabled("TORCHYARD_BUILTIN_CASES") is False
    assert json.loads(read.text(contract.TOLERANCES)) == {"float32.export": {"max-rel-l2": 1.0}}
    assert read.options() == options


def test_an_entry_option_is_declared_once_and_its_key_variable_and_option_follow() -> None:
    """Issue 59: a setting that crossed into the image took 10 files and 4 names. A `RunOptions` field is its
    row: its matrix key, its variable and its pytest option are its name's, and it reads back as written."""
    rows = {row.field: row for row in contract.ENTRY_OPTIONS}
    assert set(rows) == {item.name for item in dataclasses.fields(RunOptions)}
    assert (
        rows["ops_samples"].variable == "TORCHYARD_OPS_SAMPLES"
        and rows["ops_samples"].option == "--torchyard-ops-samples"
    )
    assert rows["builtin_cases"].option == "--torchyard-no-builtin-cases"  # on by default: the flag turns it off
    assert (
        contract.matrix_key("tests_markers") == "tests-markers"
        and contract.matrix_key("localize_seconds") == "localize-timeout"
    )
    assert Values({}).options() == RunOptions() and all(row in contract.SETTINGS for row in rows.values())
    with pytest.raises(ValueError, match="--torchyard-ops-samples: 'many' is not a whole number"):
        Values({"TORCHYARD_OPS_SAMPLES": "many"}).options()


def test_every_option_that_decides_a_result_is_in_its_key_by_declaration() -> None:
    """Issue 69: an option that changes results entered each result's key only where its author also edited the
    key's code. Now each option that decides verdicts is in `result_deciding` unless it is declared to select
    which results exist; a planted option joins it with no other edit, and changing any one changes it."""
    deciding = contract.result_deciding(RunOptions())
    for item in dataclasses.fields(RunOptions):
        how = contract.carried(item.name)
        assert (item.name in deciding) == (how.verdicts and not how.selects), item.name
    assert "fullgraph" in deciding and "localize_seconds" not in deciding and "compile_modes" not in deciding
    assert contract.result_deciding(RunOptions(fullgraph=True)) != deciding

    planted = dataclasses.make_dataclass(
        "Planted",
        [("deterministic", bool, contract._carried(False, verdicts=True, means="planted"))],
        bases=(RunOptions,),
        frozen=True,
    )
    assert contract.result_deciding(planted()) == {**deciding, "deterministic": False}
    assert contract.result_deciding(planted(deterministic=True))["deterministic"] is True


def test_an_unset_variable_reads_as_its_default() -> None:
    unset = Values({})
    assert unset.text(contract.ACCELERATOR) == "cpu" and unset.text(contract.TRUST) == "trusted"
    assert unset.items("TORCHYARD_COMPILE_MODES") == ("default",) and unset.items(contract.CASES) == ()
    assert unset.enabled("TORCHYARD_BUILTIN_CASES") and not unset.enabled(contract.REUSE_RESULTS)
    assert Values({"TORCHYARD_BUILTIN_CASES": "yes"}).enabled("TORCHYARD_BUILTIN_CASES")  # only "0" turns it off


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        (contract.SUITES, "export"),
        ("TORCHYARD_BUILTIN_CASES", "no"),
        (contract.ACCELERATOR, ("cpu",)),
        ("TORCHYARD_OPS_SAMPLES", True),
        ("TORCHYARD_OPS_SAMPLES", "2"),
    ],
)
def test_a_value_of_another_kind_is_refused(variable: str, value: object) -> None:
    """A string is a sequence: written as a list, "export" would cross as "e,x,p,o,r,t"."""
    with pytest.raises(TypeError, match=variable):
        setting(variable).encode(value)


def test_the_fingerprint_changes_with_each_setting_that_decides_verdicts_and_no_other() -> None:
    """A setting left out of the fingerprint would replay verdicts it no longer decides; one put in that
    decides none would rerun what it need not (the reports' folder differs between a container and a venv)."""
    argv, device = ["-m", "parity"], {"type": "cpu", "processor": "some cpu"}
    env = {contract.IMAGE_ID: "sha256:a"}  # the environment's identity: the image, not this interpreter's packages
    before = replay.fingerprint(argv, env, device)
    for row in SETTINGS:
        after = replay.fingerprint(argv, {**env, row.variable: "planted"}, device)
        assert (after != before) == row.verdicts, row.variable
    assert any(row.verdicts for row in SETTINGS) and not all(row.verdicts for row in SETTINGS)


@pytest.mark.parametrize(("text", "shard"), [("1/1", (1, 1)), ("2/4", (2, 4)), ("4/4", (4, 4))])
def test_a_shard_is_k_of_n(text: str, shard: tuple[int, int]) -> None:
    assert contract.parse_shard(text) == shard


@pytest.mark.parametrize("text", ["0/2", "3/2", "2", "a/b", "1/0", "-1/2", "1/2/3", ""])
def test_a_shard_that_is_not_k_of_n_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match=r"^expected K/N with 1 <= K <= N"):
        contract.parse_shard(text)


@pytest.mark.parametrize(
    ("extra", "gives"),
    [
        (["-m", "not slow", "-x"], True),
        (["-mnot slow"], True),
        (["-m=gpu"], True),
        (["-x", "--maxfail=2", "--markers"], False),
        (["--", "-m", "literal"], False),  # after `--` nothing is an option
    ],
)
def test_a_callers_own_markers_are_said_and_come_last(extra: list[str], gives: bool) -> None:
    """A caller's `-m` replaces torchyard's expression as pytest's last `-m` does: the CLI says so in a line
    (issue 58: it did silently); the entry's `tests-markers` selects among the project's tests alone."""
    args = contract.pytest_args(inimage_dir="i", report_dir="/r", suites=("parity",), project_tests=("t",), extra=extra)
    assert args[-len(extra) :] == tuple(extra)
    assert contract.gives_markers(extra) is gives
