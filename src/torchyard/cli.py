"""The command line: parse arguments, call the core, map typed errors to one line and an exit status."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from torchyard import __version__
from torchyard.errors import TorchyardError
from torchyard.github import matrix_include
from torchyard.lockcmd import check_locks, lock_all
from torchyard.matrix import Entry, load_plan, select_entries
from torchyard.tables import markdown_table


def _selection_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--matrix", type=Path, default=Path("matrix.toml"), help="path to matrix.toml")
    common.add_argument("--entry", action="append", default=[], metavar="NAME", help="select an entry (repeatable)")
    common.add_argument(
        "--accelerator",
        action="append",
        default=[],
        metavar="NAME",
        help="select by accelerator (repeatable)",
    )
    return common


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="torchyard", description=__doc__)
    parser.add_argument("--version", action="version", version=f"torchyard {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    common = _selection_parser()
    commands.add_parser("plan", parents=[common], help="print the matrix entries as a table")
    matrix = commands.add_parser("matrix", parents=[common], help="print the matrix for CI")
    matrix.add_argument("--github", action="store_true", required=True, help="GitHub Actions `include` JSON")
    lock = commands.add_parser("lock", parents=[common], help="lock each entry with uv, or --check freshness")
    lock.add_argument("--check", action="store_true", help="offline: compare every lock with its inputs")
    lock.add_argument(
        "--allow-missing", action="store_true", help="with --check: report missing locks without failing"
    )
    lock.add_argument("--lockdir", type=Path, default=Path("lockfiles"), help="where lockfiles live")
    return parser


def _selected(args: argparse.Namespace) -> tuple[Entry, ...]:
    return select_entries(load_plan(args.matrix), args.entry, args.accelerator)


def plan_table(entries: Sequence[Entry]) -> str:
    rows = [
        (
            entry.name,
            entry.accelerator.name,
            entry.python,
            f"{entry.accelerator.base_image.name}@{entry.accelerator.base_image.digest[:19]}",
            ", ".join(index.name for index in entry.indexes),
            ", ".join(entry.suites),
            ", ".join(entry.accelerator.runs_on),
        )
        for entry in entries
    ]
    headers = ("entry", "accelerator", "python", "base image", "indexes", "suites", "runs on")
    return markdown_table(headers, rows)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "plan":
            sys.stdout.write(plan_table(_selected(args)))
        elif args.command == "matrix":
            print(json.dumps(matrix_include(_selected(args)), separators=(",", ":")))
        elif args.command == "lock" and args.check:
            check_locks(_selected(args), args.lockdir, allow_missing=args.allow_missing)
        elif args.command == "lock":
            lock_all(_selected(args), args.lockdir)
        return 0
    except TorchyardError as error:
        print(f"torchyard: {error}", file=sys.stderr)
        return error.exit_code
