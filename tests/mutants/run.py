"""The mutation session (`nox -s mutants`): cosmic-ray flips each verdict-deciding comparison and rule of the
in-image side, one at a time, and runs the self-tests that guard it; every mutant must be killed.

Per target of targets.toml: a scratch copy of `src/torchyard` (the tests import it first, through
PYTHONPATH, so the checkout is never changed), cosmic-ray's session made with `cosmic-ray init`, narrowed
with its own filters to the target's functions (`cr-filter-lines`) and to the operators that change a
decision (`cr-filter-operators`), a baseline run (the tests pass unmutated), then every mutant
(`cosmic-ray exec`). The self-tests run in the stack's environment (`--stack`, a venv with torch and pytest:
`nox -s test-cpu -- --local` makes `.torchyard/venvs/cpu`), judged by `selftests.py`.

    python tests/mutants/run.py --stack .torchyard/venvs/cpu/bin/python [--ci] [--only NAME ...]
"""

from __future__ import annotations

import argparse
import ast
import concurrent.futures
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path

import tomli_w
from cosmic_ray.work_db import WorkDB, use_db
from cosmic_ray.work_item import WorkerOutcome, WorkResult

SKIPPED = WorkerOutcome.SKIPPED

HERE = Path(__file__).parent
SOURCE = HERE.parents[1] / "src" / "torchyard"
BIN = Path(sys.executable).parent
# Operators that change a decision: comparisons, boolean connectives, negation and boolean constants.
DECISIONS = (
    r"core/(ReplaceComparisonOperator_|ReplaceAndWithOr|ReplaceOrWithAnd|AddNot|ReplaceTrueWithFalse"
    r"|ReplaceFalseWithTrue|ReplaceUnaryOperator_Delete_Not)"
)
# Mutants that compute the same thing for the values these lines see (`==` and `is` on interned strings
# and small ints, `is None` and `== None`): no test can kill them.
EQUIVALENT = tuple(
    f"core/ReplaceComparisonOperator_{pair}$" for pair in ("Eq_Is", "NotEq_IsNot", "Is_Eq", "IsNot_NotEq")
)


@dataclass(frozen=True)
class Equivalent:
    """A mutant no test can kill, named by its line's text and operator, and why."""

    line: str
    operator: str
    why: str


@dataclass(frozen=True)
class Target:
    name: str
    module: str
    functions: tuple[str, ...]
    tests: tuple[str, ...]
    ci: bool
    equivalent: tuple[Equivalent, ...]


def load_targets(path: Path = HERE / "targets.toml") -> list[Target]:
    return [
        Target(
            item["name"],
            item["module"],
            tuple(item["functions"]),
            tuple(item["tests"]),
            item.get("ci", False),
            tuple(Equivalent(**equivalent) for equivalent in item.get("equivalent", [])),
        )
        for item in tomllib.loads(path.read_text())["target"]
    ]


# `==` and `!=` turned into an ordering (`<`, `>=`, ...): where one side is a string literal, the comparison
# asks which name of a closed set this is (a suite, a status, a backend), whose alphabetical order means
# nothing: such a mutant is killed by the test that kills `==` turned into `!=`, or computes the same.
ORDERING = re.compile(r"core/ReplaceComparisonOperator_(Eq|NotEq)_(Lt|LtE|Gt|GtE)$")
NAMES = "the order of names means nothing"


def compares_a_name(tree: ast.Module, line: int, column: int) -> bool:
    """Whether the innermost comparison at (line, column) compares with a string literal (on its right)."""
    spans = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Compare)
        and (node.lineno, node.col_offset) <= (line, column) <= (node.end_lineno or line, node.end_col_offset or 0)
    ]
    if not spans:
        return False
    innermost = max(spans, key=lambda node: (node.lineno, node.col_offset))  # a nested one starts inside
    return any(isinstance(side, ast.Constant) and isinstance(side.value, str) for side in innermost.comparators)


def skip_equivalents(session: Path, module: Path, equivalents: tuple[Equivalent, ...]) -> list[str]:
    """Mark the target's declared equivalent mutants, and orderings of names, skipped in the session (as
    cosmic-ray's own filters do); a declaration that matches no mutant is stale and stops the session."""
    source = module.read_text()
    lines, tree = source.splitlines(), ast.parse(source)
    used, skipped = set(), []
    with use_db(str(session), WorkDB.Mode.open) as database:
        for item in list(database.pending_work_items):
            (mutation,) = item.mutations
            line, column = mutation.start_pos
            text = lines[line - 1].strip()
            declared = [e for e in equivalents if text == e.line and mutation.operator_name == e.operator]
            used.update(declared)
            ordering = ORDERING.match(mutation.operator_name) and compares_a_name(tree, line, column)
            why = declared[0].why if declared else NAMES if ordering else None
            if why is not None:
                database.set_result(item.job_id, WorkResult(output=f"equivalent: {why}", worker_outcome=SKIPPED))
                skipped.append(f"{module.name}:{line} {mutation.operator_name}: {why}")
    stale = [equivalent for equivalent in equivalents if equivalent not in used]
    if stale:
        raise SystemExit(f"mutants: no mutant matches the declared equivalent {stale[0]} (targets.toml is stale)")
    return skipped


def line_ranges(module: Path, functions: tuple[str, ...]) -> list[str]:
    """Each function's lines (`Class.method` for a method), from the module's syntax tree."""
    tree = ast.parse(module.read_text())
    found: dict[str, ast.FunctionDef] = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            found[node.name] = node
        elif isinstance(node, ast.ClassDef):
            found.update({f"{node.name}.{item.name}": item for item in node.body if isinstance(item, ast.FunctionDef)})
    missing = [name for name in functions if name not in found]
    if missing:
        raise SystemExit(f"mutants: {module}: no function {', '.join(missing)} (targets.toml is stale)")
    return [f"{found[name].lineno}-{found[name].end_lineno}" for name in functions]


def configure(target: Target, scratch: Path, stack: str, reports: Path) -> Path:
    """Write the target's cosmic-ray config into `scratch` and return its path."""
    module = scratch / target.module
    inimage = scratch / "torchyard" / "inimage"  # a test file is in one of its test folders
    tests = [
        str(min(inimage.glob(f"*/{arg}"), default=inimage / arg)) if arg.endswith(".py") else arg
        for arg in target.tests
    ]
    command = [sys.executable, str(HERE / "selftests.py"), stack, str(scratch), str(reports), *tests]
    config = {
        "cosmic-ray": {
            "module-path": str(module),
            "timeout": 900.0,  # a mutant that hangs the self-tests is killed after this long
            "excluded-modules": [],
            "test-command": shlex.join(command),
            "distributor": {"name": "local"},
            "filters": {
                "line-filter": {"lines": {str(module): line_ranges(module, target.functions)}},
                "operators-filter": {"exclude-operators": [f"(?!{DECISIONS})", *EQUIVALENT]},
            },
        }
    }
    path = scratch / "cosmic-ray.toml"
    path.write_text(tomli_w.dumps(config))
    return path


def cosmic_ray(*args: str) -> subprocess.CompletedProcess[str]:
    completed = subprocess.run([str(BIN / args[0]), *args[1:]], check=False, capture_output=True, text=True)
    if completed.returncode != 0:
        sys.stderr.write(completed.stdout + completed.stderr)
        raise SystemExit(f"mutants: {' '.join(args[:2])} failed with exit status {completed.returncode}")
    return completed


def run_target(target: Target, stack: str, workdir: Path) -> tuple[int, list[str], float]:
    """The target's mutants: how many ran, the survivors (described), and the seconds it took."""
    started = time.monotonic()
    scratch = workdir / target.name
    shutil.rmtree(scratch, ignore_errors=True)
    shutil.copytree(SOURCE, scratch / "torchyard", ignore=shutil.ignore_patterns("__pycache__"))
    config, session = configure(target, scratch, stack, scratch / "reports"), scratch / "session.sqlite"
    cosmic_ray("cosmic-ray", "init", str(config), str(session))
    cosmic_ray("cr-filter-operators", str(session), str(config))
    cosmic_ray("cr-filter-lines", "--config", str(config), str(session))
    for equivalent in skip_equivalents(session, scratch / target.module, target.equivalent):
        print(f"  equivalent  {equivalent}", flush=True)
    cosmic_ray("cosmic-ray", "baseline", str(config))
    cosmic_ray("cosmic-ray", "exec", str(config), str(session))
    ran, survivors = 0, []
    for line in cosmic_ray("cosmic-ray", "dump", str(session)).stdout.splitlines():
        item, result = json.loads(line)
        if result is None or result["worker_outcome"] == "skipped":
            continue
        ran += 1
        (mutation,) = item["mutations"]
        where = f"{target.module}:{mutation['start_pos'][0]} {mutation['operator_name']}#{mutation['occurrence']}"
        print(f"  {result['test_outcome'] or result['worker_outcome']:>9}  {where}", flush=True)
        if result["test_outcome"] != "killed":
            survivors.append(f"{where}: {result['test_outcome'] or result['worker_outcome']}")
    return ran, survivors, time.monotonic() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stack", required=True, help="the python of a venv with torch, pytest and the stack")
    parser.add_argument("--only", action="append", default=[], metavar="NAME", help="this target (repeatable)")
    parser.add_argument("--ci", action="store_true", help="the targets marked ci = true")
    parser.add_argument("--workdir", type=Path, default=Path(".nox/mutants-work"))
    args = parser.parse_args(argv)
    if not Path(args.stack).is_file():
        raise SystemExit(f"mutants: no python at {args.stack}; `nox -s test-cpu -- --local` makes one")
    targets = [t for t in load_targets() if (not args.only or t.name in args.only) and (t.ci or not args.ci)]
    unknown = set(args.only) - {target.name for target in load_targets()}
    if unknown or not targets:
        raise SystemExit(f"mutants: unknown target {', '.join(sorted(unknown))}; see tests/mutants/targets.toml")
    rows, survivors = [], []
    for target in targets:
        print(f"mutants: {target.name} ({target.module}: {', '.join(target.functions)})", flush=True)
    # Each target has its own scratch copy and cosmic-ray session: targets run side by side, one per core (a
    # mutant's run is one process, most of it importing torch), and their lines name their modules.
    stack, workdir = str(Path(args.stack).absolute()), args.workdir.absolute()
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, min(len(targets), os.cpu_count() or 1))) as pool:
        outcomes = list(pool.map(lambda target: run_target(target, stack, workdir), targets))
    for target, (ran, alive, seconds) in zip(targets, outcomes, strict=True):
        survived = alive if ran else [f"{target.name}: no mutant was made (the filters left nothing)"]
        rows.append(f"| {target.name} | {ran} | {ran - len(survived)} | {seconds:.0f} s |")
        survivors += survived
    print("\n| target | mutants | killed | time |\n|---|---|---|---|\n" + "\n".join(rows))
    for survivor in survivors:
        print(f"mutants: SURVIVED {survivor}")
    return 1 if survivors else 0


if __name__ == "__main__":
    sys.exit(main())
