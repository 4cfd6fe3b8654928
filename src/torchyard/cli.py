"""The command line: parse arguments, call the core, map typed errors to one line and an exit status."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

from torchyard import __version__
from torchyard.commands.build import build, make_base
from torchyard.commands.doctor import doctor
from torchyard.commands.init import init
from torchyard.commands.lock import check_locks, lock_all
from torchyard.commands.matrix import RUNNERS, matrix_include
from torchyard.commands.plan import plan_table
from torchyard.commands.prune import prune
from torchyard.commands.refresh import refresh
from torchyard.commands.report import report
from torchyard.commands.sessions import run_nox
from torchyard.commands.test import test_entries
from torchyard.contract import (
    OPS_SHARD_OPTION,
    RERUN_OPTION,
    RERUN_SELF_TESTS_OPTION,
    REUSE_RESULTS,
    gives_markers,
    parse_shard,
)
from torchyard.errors import TorchyardError, UsageError
from torchyard.image.debootstrap import DEBIAN_SUITES, base_tag
from torchyard.image.plan import BuildOptions
from torchyard.matrix import Entry, load_plan, narrow_suites, select_entries
from torchyard.matrix.gate import NO_TRUSTED_CONFIG, gate_entries, load_trusted
from torchyard.matrix.machine import IMAGE_REFERENCE, MEMORY, Machine, load_machine
from torchyard.matrix.reader import one_line
from torchyard.names import ACCELERATOR_NAMES, SUITE_NAMES
from torchyard.reports import render
from torchyard.trust import TRUST_ENV, TRUST_LEVELS, Trust, project_scope, resolve_trust
from torchyard.util.proc import redact


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


def _add_report(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    report_command = commands.add_parser(
        "report", help="merge runs' parity.json into one compatibility table (Markdown, and a static HTML page)"
    )
    report_command.add_argument(
        "paths", nargs="*", type=Path, metavar="PATH",
        help="reports folders, CI artifacts or parity.json files (default: every run under ./reports)",
    )  # fmt: skip
    for kind in render.FORMATS:  # a format is its renderer and this flag
        report_command.add_argument(f"--{kind.name}", type=Path, metavar="FILE", help=kind.means)
    report_command.add_argument(
        "--ops-expectations", type=Path, metavar="DIR",
        help="write each swept stack's ops expectations file here, its shards put back together",
    )  # fmt: skip


def _add_test(
    commands: argparse._SubParsersAction[argparse.ArgumentParser], parents: list[argparse.ArgumentParser]
) -> None:
    test = commands.add_parser(
        "test", parents=parents, help="run the selected entries' suites; other arguments go to pytest"
    )
    where = test.add_mutually_exclusive_group()
    where.add_argument("--local", action="store_true", help="on this machine, in a venv made from the lock")
    where.add_argument("--in-place", action="store_true", help="with this interpreter as it is: no lock, unlocked")
    test.add_argument(
        "--suite",
        action="append",
        default=[],
        choices=SUITE_NAMES,
        help="run only this one of the entry's suites (repeatable; the harness's self-tests run too)",
    )
    test.add_argument(
        "--rerun-self-tests",
        action="store_true",
        help="run every harness self-test, even those a run on this stack and device already passed",
    )
    test.add_argument(
        "--rerun",
        action="store_true",
        help="evaluate every result, none replayed from the result cache (and none kept in it)",
    )
    test.add_argument("--keep", action="store_true", help="keep the container afterwards, for debugging")
    test.add_argument(
        "--baseline", type=Path, metavar="PATH",
        help="hold each entry's run to this one (a reports folder, a parity.json, or the default branch's CI "
        "artifact) instead of its last trusted run on this machine",
    )  # fmt: skip
    test.add_argument(
        "--reuse-results",
        action="store_true",
        help="replay the last verdicts (marked replayed) when nothing that decides them changed",
    )
    test.add_argument(
        "--ops-shard",
        type=_shard,
        metavar="K/N",
        help="run the K-th of N slices of the ops suite's operators (a workflow spreads a sweep over runners)",
    )
    test.add_argument("--reports", type=Path, default=Path("reports"), help="where reports are written")
    test.add_argument(
        "--trust",
        choices=TRUST_LEVELS,
        help="trusted or untrusted (default: TORCHYARD_TRUST, else from GitHub Actions' event, else trusted)",
    )
    test.add_argument(
        "--unsandboxed",
        action="store_true",
        help="let an untrusted run use --local, --in-place or a native entry (no container around its code)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="torchyard",
        description="Lock, build and test the PyTorch deployment stack per accelerator, from matrix.toml.",
    )
    parser.add_argument("--version", action="version", version=f"torchyard {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    common = _selection_parser()
    lockdir = argparse.ArgumentParser(add_help=False)
    lockdir.add_argument("--lockdir", type=Path, default=Path("lockfiles"), help="where lockfiles live")

    commands.add_parser("plan", parents=[common], help="print the matrix entries as a table")

    matrix = commands.add_parser("matrix", parents=[common], help="print the matrix for CI")
    matrix.add_argument("--github", action="store_true", required=True, help="GitHub Actions `include` JSON")
    matrix.add_argument(
        "--runners",
        choices=RUNNERS,
        default="all",
        help="only the entries on GitHub-hosted runners (runs-on is one GitHub-hosted label) or on self-hosted ones",
    )

    lock = commands.add_parser("lock", parents=[common, lockdir], help="lock each entry with uv, or --check them")
    lock.add_argument("entries", nargs="*", metavar="ENTRY", help="entries to lock (same as --entry)")
    lock.add_argument("--check", action="store_true", help="offline: compare every lock with its inputs")

    build = commands.add_parser("build", parents=[common, lockdir], help="build the selected entries' images")
    build.add_argument("entries", nargs="*", metavar="ENTRY", help="entries to build (same as --entry)")
    build.add_argument("--push", action="store_true", help="push to the registry named by the tags (buildx)")
    build.add_argument("--cache-from", action="append", default=[], metavar="REF", help="BuildKit cache source")
    build.add_argument("--cache-to", action="append", default=[], metavar="REF", help="BuildKit cache export (buildx)")
    build.add_argument(
        "--trust", choices=TRUST_LEVELS, help="as for test: an untrusted build takes less (docs: trust and the sandbox)"
    )

    _add_test(commands, [common, lockdir])
    doctor_command = commands.add_parser("doctor", help="what this host offers each accelerator, and what to fix")
    doctor_command.add_argument("--accelerator", action="append", default=[], choices=ACCELERATOR_NAMES)

    commands.add_parser("refresh", parents=[common], help="move base-image digests and exclude-newer to now")

    prune_command = commands.add_parser("prune", help="remove torchyard's old images, stopped containers, build cache")
    prune_command.add_argument("--entry", action="append", default=[], metavar="NAME", help="only this entry's")
    prune_command.add_argument(
        "--keep", type=int, default=2, help="images to keep per project and entry (newest first)"
    )
    prune_command.add_argument("--keep-storage", default="10g", help="build cache to keep, such as 10g")
    prune_command.add_argument("--dry-run", action="store_true", help="say what would go, remove nothing")
    reach = prune_command.add_mutually_exclusive_group()
    reach.add_argument(
        "--this-project",
        action="store_true",
        help="only this project's images, caches and containers (its GitHub repository under Actions, else "
        "--matrix's folder); the default",
    )
    reach.add_argument(
        "--all-projects",
        action="store_true",
        help="every project's on this engine, and BuildKit's build cache (shared by them all)",
    )
    prune_command.add_argument("--matrix", type=Path, default=Path("matrix.toml"), help="path to matrix.toml")

    init_command = commands.add_parser("init", help="make this project a torchyard project (never overwrites)")
    init_command.add_argument("--force", action="store_true", help="replace files that exist")
    init_command.add_argument(
        "--torchyard-spec",
        metavar="REQUIREMENT",
        help="what the workflow installs torchyard from: torchyard==VERSION, or a VCS URL pinned by commit "
        "(default: as this torchyard was installed, where GitHub's runners can reach that)",
    )

    commands.add_parser(
        "nox",
        add_help=False,  # `torchyard nox --help` is nox's help
        help="run this project's nox sessions with the nox installed with torchyard (for tool installs)",
    )

    _add_report(commands)

    base = commands.add_parser(
        "base", help="bootstrap a local Debian base image (mmdebstrap or debootstrap, then docker import)"
    )
    base.add_argument(
        "--suite", default="bookworm", choices=sorted(DEBIAN_SUITES),
        help=f"the Debian release ({', '.join(f'{name}: Python {py}' for name, py in DEBIAN_SUITES.items())})",
    )  # fmt: skip
    base.add_argument("--tag", type=_image_tag, help=f"the image tag to create (default: {base_tag('SUITE')})")
    return parser


def _selected(
    args: argparse.Namespace, machine: Machine, passthrough: list[str] | None = None, trust: Trust = "trusted"
) -> tuple[Entry, ...]:
    """The entries that --entry, positional ENTRY arguments and --accelerator select (for `test`, running
    only the suites `--suite` names, where it names any), through the trust gate: an untrusted run's
    entries keep the trusted matrix.toml's policy values (`torchyard.matrix.gate`).

    For `test`, words before `--` that name an entry are taken out of `passthrough`; everything else, and
    everything after `--` (the separator itself dropped), goes to pytest.
    """
    allowed = machine.allowed_docker_run
    plan = load_plan(args.matrix, allowed_docker_run=allowed)
    trusted = load_trusted(args.matrix, allowed, os.environ) if trust == "untrusted" else NO_TRUSTED_CONFIG
    names = [*args.entry, *getattr(args, "entries", [])]
    if passthrough is not None:
        known = {entry.name for entry in plan.entries}
        split = passthrough.index("--") if "--" in passthrough else len(passthrough)
        before, after = passthrough[:split], passthrough[split + 1 :]
        names += [word for word in before if word in known]
        passthrough[:] = [word for word in before if word not in known] + after
    selected = narrow_suites(plan, select_entries(plan, names, args.accelerator), getattr(args, "suite", ()))
    return gate_entries(selected, trust, trusted)


# The commands that read nothing of this machine's settings: a bad machine.toml does not stop them.
MACHINE_FREE = ("prune", "init", "nox", "report", "base")


def _shard(text: str) -> str:
    try:
        parse_shard(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return text


def _image_tag(text: str) -> str:
    """A name `docker import` takes (no digest: the import makes the image), checked before any bootstrapping."""
    if "@" in text or not IMAGE_REFERENCE.fullmatch(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not an image name (registry/name:tag, lower case)")
    return text


def _machine_free(args: argparse.Namespace, passthrough: list[str]) -> int:
    if args.command == "prune":
        if args.keep < 0 or not MEMORY.fullmatch(args.keep_storage):
            raise UsageError("prune: --keep takes a whole number >= 0 and --keep-storage a size such as 10g")
        project = None
        if not args.all_projects:  # a shared engine holds other projects' images: they are theirs to prune
            if not args.matrix.is_file():
                raise UsageError(
                    f"prune: no {args.matrix} here: --matrix PATH names the project's, --all-projects prunes "
                    "every project's"
                )
            project = project_scope(args.matrix, os.environ)
        return prune(
            keep=args.keep, keep_storage=args.keep_storage, dry_run=args.dry_run, entries=args.entry, project=project
        )
    if args.command == "init":
        init(Path.cwd(), force=args.force, spec=args.torchyard_spec)
    elif args.command == "nox":
        return run_nox(passthrough)
    elif args.command == "report":
        files = {kind.name: getattr(args, kind.name) for kind in render.FORMATS}
        return report(args.paths, files=files, ops_expectations=args.ops_expectations)
    elif args.command == "base":
        make_base(args.tag or base_tag(args.suite), suite=args.suite)
    return 0


def _on_this_machine(args: argparse.Namespace, passthrough: list[str], machine: Machine) -> int:
    """The commands that read this machine's settings: `machine`, loaded once at the edge, is passed in."""
    if args.command == "plan":
        sys.stdout.write(plan_table(_selected(args, machine), machine.base_overrides))
    elif args.command == "matrix":
        entries = _selected(args, machine, trust=resolve_trust(None, os.environ).level)
        print(json.dumps(matrix_include(entries, runners=args.runners), separators=(",", ":")))
    elif args.command == "lock" and args.check:
        check_locks(_selected(args, machine), args.lockdir)
    elif args.command == "lock":
        named = bool(args.entry or args.entries or args.accelerator)
        lock_all(_selected(args, machine), args.lockdir, machine, all_entries=not named)
    elif args.command == "build":
        options = BuildOptions(args.push, tuple(args.cache_from), tuple(args.cache_to))
        trust = resolve_trust(args.trust, os.environ)
        selected = _selected(args, machine, trust=trust.level)
        return build(
            selected, args.lockdir, options, machine=machine, project=project_scope(args.matrix, os.environ),
            env={**os.environ, TRUST_ENV: trust.level},
        )  # fmt: skip
    elif args.command == "doctor":
        return doctor(args.accelerator or ACCELERATOR_NAMES, machine)
    elif args.command == "refresh":
        refresh(args.matrix, machine)
    elif args.command == "test":
        trust = resolve_trust(args.trust, os.environ)
        selected = _selected(args, machine, passthrough, trust.level)
        if gives_markers(passthrough):
            print(
                "torchyard: your -m replaces the expression that selects torchyard's suites and self-tests, as "
                "pytest's last -m does (a selected suite that then passes nothing fails the run); matrix.toml's "
                "tests-markers selects among your own tests alone",
                file=sys.stderr,
            )
        return test_entries(
            selected,
            mode="local" if args.local else "in-place" if args.in_place else "container",
            lockdir=args.lockdir,
            reports=args.reports,
            pytest_args=[
                *passthrough,
                *([f"{OPS_SHARD_OPTION}={args.ops_shard}"] if args.ops_shard else []),
                *([RERUN_SELF_TESTS_OPTION] if args.rerun_self_tests else []),
                *([RERUN_OPTION] if args.rerun else []),
            ],
            machine=machine,
            keep=args.keep,
            trust=trust,
            project=project_scope(args.matrix, os.environ),
            matrix=args.matrix,
            unsandboxed=args.unsandboxed,
            baseline=args.baseline,
            env={**os.environ, REUSE_RESULTS: "1"} if args.reuse_results else os.environ,
        )
    return 0


def _stop(signum: int, frame: object) -> None:
    """SIGTERM and SIGHUP (a cancelled step, a closed terminal) stop a run as Ctrl-C does: the container is
    removed and nothing unvetted reaches the reports. Later signals wait for that cleanup to finish."""
    for stopping in STOP_SIGNALS:
        signal.signal(stopping, signal.SIG_IGN)
    raise KeyboardInterrupt(signal.Signals(signum).name)


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def install_stop_handlers() -> None:
    """Every stopping signal as Ctrl-C (in the main thread, where Python delivers signals)."""
    if threading.current_thread() is threading.main_thread():
        for stopping in STOP_SIGNALS:
            signal.signal(stopping, _stop)


def main(argv: Sequence[str] | None = None) -> int:
    install_stop_handlers()
    args, passthrough = build_parser().parse_known_args(argv)
    if passthrough and args.command not in ("test", "nox"):
        build_parser().parse_args(argv)  # reports the unknown arguments and exits 2
    try:
        if args.command in MACHINE_FREE:
            return _machine_free(args, passthrough)
        return _on_this_machine(args, passthrough, load_machine(os.environ))
    except TorchyardError as error:
        print(f"torchyard: {redact(one_line(str(error)))}", file=sys.stderr)
        return error.exit_code
    except KeyboardInterrupt as stopped:
        print(f"torchyard: interrupted{f' ({stopped})' if str(stopped) else ''}", file=sys.stderr)
        return 130
