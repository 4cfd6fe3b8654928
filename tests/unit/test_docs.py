"""The docs cannot drift: the reference pages are what the code gives, the key lists are the keys the loaders
read, every command block runs somewhere or says what hardware it needs, and README stays one screen."""

from __future__ import annotations

import importlib.util
import re
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import tomli_w
import yaml

from tests import docblocks
from torchyard.errors import ConfigError
from torchyard.matrix import keys, machine
from torchyard.matrix.load import parse_plan
from torchyard.matrix.reader import Table

ROOT = Path(__file__).parents[2]


@pytest.fixture(scope="module")
def generate() -> Iterator[ModuleType]:
    spec = importlib.util.spec_from_file_location("docs_generate", ROOT / "docs" / "generate.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["docs_generate"] = module
    spec.loader.exec_module(module)
    yield module
    del sys.modules["docs_generate"]


def test_the_reference_pages_are_what_the_code_gives(generate: ModuleType) -> None:
    assert generate.stale() == [], "run `python docs/generate.py` and commit docs/reference/"


def test_a_stale_page_is_named(generate: ModuleType, tmp_path: Path) -> None:
    shutil.copytree(ROOT / "docs" / "reference", tmp_path, dirs_exist_ok=True)
    page = tmp_path / "matrix.md"
    page.write_text(page.read_text().replace('| `timeout` | duration | `"2h"`', '| `timeout` | duration | `"3h"`'))
    (tmp_path / "cli.md").unlink()
    assert generate.stale(tmp_path) == ["matrix.md", "cli.md"]


# A project is a package or a source folder: these keys are read in one form each.
PACKAGE_ONLY, SOURCE_ONLY = {"path", "extras", "groups"}, {"source"}


def _full_matrix(generate: ModuleType, *, source: bool) -> dict[str, Any]:
    """The base matrix with every listed key set to its example (entry.project as a table, a package's or a
    source folder's)."""
    data: dict[str, Any] = generate._matrix_with(keys.MATRIX_KEYS[0], None, None)
    left_out = PACKAGE_ONLY if source else SOURCE_ONLY
    for key in keys.MATRIX_KEYS:
        if key.table == "entry" and key.name == "project":
            continue  # the table form below covers it, with its own keys
        if key.table == "entry.project" and key.name in left_out:
            continue
        generate._place(data, key)[key.written] = key.example
    for key in keys.MATRIX_KEYS:  # what each example needs beside it (lists joined: `suites` gains "ops")
        table = generate._place(data, key)
        for name, value in key.alongside.items():
            if isinstance(value, list) and isinstance(table.get(name), list):
                table[name] = [*table[name], *(item for item in value if item not in table[name])]
            else:
                table.setdefault(name, value)
    if not source:
        data["entry"][0]["project"]["path"] = "."
    return data


def _kind(path: tuple[str, ...]) -> str:
    """A reader's table path as the key lists name it (`('entry "cpu"', 'project')` -> `entry.project`)."""
    parts = ["entry" if part.startswith("entry") else part for part in path]
    if parts[:1] == ["accelerators"] and len(parts) > 1:
        parts[1] = "<name>"
    if parts[:2] == ["entry", "tolerances"] and len(parts) > 2:
        parts[2] = "<key>"
    return ".".join(parts)


def test_the_loader_reads_exactly_the_listed_keys(
    generate: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "pyproject.toml").write_text(generate.PROJECT)
    (tmp_path / "tests").mkdir()
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "pyproject.toml").write_text(generate.PROJECT)
    (tmp_path / "requirements.txt").write_text(generate.REQUIREMENTS)
    read: set[tuple[str, str]] = set()
    original = Table._get

    def recording(self: Table, key: str, required: bool) -> Any:
        read.add((_kind(self._path), key))
        return original(self, key, required)

    monkeypatch.setattr(Table, "_get", recording)
    for source in (False, True):
        parse_plan(tomli_w.dumps(_full_matrix(generate, source=source)), tmp_path / "matrix.toml")
    # Tables of user-named keys: whatever name was read there is that table's `<...>` key.
    named = {key.table: key.name for key in keys.MATRIX_KEYS if key.name.startswith("<")}
    found = {(table, named.get(table, key)) for table, key in read if table != "accelerators"}
    listed = {(key.table, key.name) for key in keys.MATRIX_KEYS}
    listed |= {("", "indexes"), ("", "accelerators"), ("", "entry")} | {("accelerators.<name>", "vendor")}
    listed |= {("entry", "tolerances")}
    assert found == listed


def test_each_listed_bad_value_is_refused_and_each_example_accepted(generate: ModuleType) -> None:
    with generate._project_folder() as folder:
        for key in keys.MATRIX_KEYS:
            _, error = generate.matrix_facts(key, folder)  # raises if the bad value loads
            assert error.startswith("matrix.toml: "), (key.name, error)


def test_machine_keys_are_the_ones_machine_toml_reads(generate: ModuleType, tmp_path: Path) -> None:
    tables = {key.table for key in keys.MACHINE_KEYS}
    assert tables == set(machine.TABLES)
    assert {key.name for key in keys.MACHINE_KEYS if key.table == "limits"} == set(machine.LIMIT_KEYS)
    for key in keys.MACHINE_KEYS:
        assert generate.machine_error(key, tmp_path)  # the bad value gets an error
        path = tmp_path / "machine.toml"
        path.write_text(tomli_w.dumps({key.table: {key.written: key.example}}))
        machine.load_machine({machine.FILE_ENV_VAR: str(path)})  # the example loads


def test_a_bad_value_the_loader_accepts_fails_the_generator(generate: ModuleType, tmp_path: Path) -> None:
    accepted = keys.Key("limits", "pids", "", "", "", 8192, 128)
    with pytest.raises(AssertionError, match="accepted"):
        generate.machine_error(accepted, tmp_path)
    refused_example = keys.Key("entry", "python", "", "", "", "2.7", "3.12")
    with generate._project_folder() as folder, pytest.raises(ConfigError, match=r'expected "3\.N"'):
        generate.matrix_facts(refused_example, folder)


def test_every_user_facing_variable_is_documented() -> None:
    documented = {variable.name for variable in keys.ENVIRONMENT}
    host_side = [
        path
        for path in (ROOT / "src" / "torchyard").rglob("*.py")
        if "inimage" not in path.parts and path.name != "contract.py"
    ]
    # A variable is read where a constant named *_ENV* holds its name, or where env is indexed by it.
    pattern = re.compile(r'[A-Z_]*ENV[A-Z_]* = "(TORCHYARD_[A-Z_]+)"|env(?:iron)?(?:\.get\(|\[)"(TORCHYARD_[A-Z_]+)"')
    used = {name for path in host_side for match in pattern.findall(path.read_text()) for name in match if name}
    assert {"TORCHYARD_DOCKER", "TORCHYARD_MIRRORS"} <= used  # the pattern sees both ways
    assert used <= documented, f"not in torchyard.matrix.keys.ENVIRONMENT: {sorted(used - documented)}"


def test_every_command_block_runs_in_a_test_or_names_what_it_needs() -> None:
    found = docblocks.command_blocks()
    assert found, "no command blocks found"
    unmarked = [block.where for block in found if block.marker is None]
    assert not unmarked, f"command blocks with neither `<!-- runs: ID -->` nor `<!-- needs: ... -->`: {unmarked}"
    consumers = [*(ROOT / "tests").rglob("*.py"), ROOT / ".ci" / "run"]
    text = "\n".join(path.read_text() for path in consumers if path.name != "docblocks.py")
    for identifier in {block.marker[1] for block in found if block.marker and block.marker[0] == "runs"}:
        docblocks.block(identifier)  # one text wherever it appears
        ran = f'block("{identifier}")' in text or re.search(rf"(?m)^run_block {re.escape(identifier)}$", text)
        assert ran, f"no test and no step of .ci/run runs the block marked `runs: {identifier}`"


def test_an_unmarked_block_and_two_texts_under_one_id_are_caught(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "<!-- runs: a -->\n```bash\necho 1\n```\n\n```bash\necho 2\n```\n<!-- runs: a -->\n```bash\nx\n```\n"
    )
    found = docblocks.blocks(page)
    assert [block.marker for block in found] == [("runs", "a"), None, ("runs", "a")]
    with pytest.raises(LookupError, match="2 different command blocks"):
        docblocks.block("a", found)


def test_readme_fits_one_screen() -> None:
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 60, f"README.md has {len(lines)} lines; the rest belongs in docs/"


def _threat_model_rows() -> set[str]:
    text = (ROOT / "docs" / "concepts" / "trust.md").read_text()
    section = text[text.index("## The threat model") :]
    return {match.group(1) for match in re.finditer(r"(?m)^\| `([^`]+)` \|[^|]+\|[^|]*\S[^|]*\|$", section)}


def test_every_matrix_key_says_how_it_is_trusted() -> None:
    """A new matrix.toml key must say who reads it and what gates it, in the threat model's table."""
    rows = _threat_model_rows()
    listed = {f"{key.table}.{key.name}" if key.table else key.name for key in keys.MATRIX_KEYS}
    assert listed - rows == set(), "keys of matrix.toml without a row in docs/concepts/trust.md's threat model"


def test_every_variable_the_workflows_pass_says_how_it_is_trusted() -> None:
    workflows = [
        *(ROOT / ".github" / "workflows").glob("*.yml"),
        ROOT / "src" / "torchyard" / "templates" / "torchyard.yml",
    ]
    passed = {name for path in workflows for name in re.findall(r"\b(TORCHYARD_[A-Z_]+)", path.read_text())}
    for path in workflows:  # every variable a job or step sets, and what steps append to $GITHUB_ENV
        passed |= _env_names(yaml.safe_load(path.read_text().replace("@SPEC@", "torchyard")))
        passed |= set(re.findall(r'echo "([A-Z_]+)=[^"]*" >> "\$GITHUB_ENV"', path.read_text()))
    # and the runner's variables torchyard reads: the trust of a run and its cache scope are decided by them
    passed |= {
        name for path in (ROOT / "src").rglob("*.py") for name in re.findall(r"\b(GITHUB_[A-Z_]+)", path.read_text())
    }
    assert {"ENTRY", "BASE_REF", "PUSH", "GITHUB_EVENT_PATH"} <= passed
    assert passed - _threat_model_rows() == set(), "variables without a row in docs/concepts/trust.md's threat model"


def _env_names(node: object) -> set[str]:
    if isinstance(node, dict):
        own = set(node["env"]) if isinstance(node.get("env"), dict) else set()
        return own.union(*(_env_names(value) for value in node.values()))
    if isinstance(node, list):
        return set().union(*(_env_names(item) for item in node))
    return set()
