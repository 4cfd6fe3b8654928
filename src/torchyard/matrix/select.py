"""Pick entries out of a plan by name and accelerator, failing loudly on names that do not exist."""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Sequence

from torchyard.errors import UsageError
from torchyard.matrix.schema import Entry, Plan
from torchyard.names import ACCELERATOR_NAMES, SuiteName


def select_entries(plan: Plan, names: Sequence[str] = (), accelerators: Sequence[str] = ()) -> tuple[Entry, ...]:
    """Entries named in `names` (all when empty) whose accelerator is in `accelerators` (any when empty).

    Order follows matrix.toml. An unknown name or accelerator is a `UsageError` with a suggestion;
    a selection that matches nothing is one too, so no session ever "passes" on zero entries.
    """
    known = [entry.name for entry in plan.entries]
    for name in names:
        if name not in known:
            close = difflib.get_close_matches(name, known, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else f" (entries: {', '.join(known)})"
            raise UsageError(f"{plan.source.name}: no entry named {name!r}{hint}")
    for accelerator in accelerators:
        if accelerator not in ACCELERATOR_NAMES:
            raise UsageError(f"unknown accelerator {accelerator!r} (expected one of {', '.join(ACCELERATOR_NAMES)})")
    chosen = tuple(
        entry
        for entry in plan.entries
        if (not names or entry.name in names) and (not accelerators or entry.accelerator.name in accelerators)
    )
    if not chosen:
        wanted = ", ".join([*names, *accelerators])
        raise UsageError(f"{plan.source.name}: no entry matches {wanted}")
    return chosen


def narrow_suites(plan: Plan, entries: Sequence[Entry], suites: Sequence[SuiteName]) -> tuple[Entry, ...]:
    """`entries` running only `suites` (all of theirs when empty), in matrix.toml's order: a machine without
    ExecuTorch or Torch-TensorRT runs the others. A suite an entry does not run is a `UsageError` naming
    that entry's `suites`, never a run that leaves it out silently."""
    if not suites:
        return tuple(entries)
    for entry in entries:
        missing = [suite for suite in suites if suite not in entry.suites]
        if missing:
            raise UsageError(
                f"{plan.source.name}: entry {entry.name!r} does not run the suite{'s' if len(missing) > 1 else ''} "
                f"{', '.join(missing)} (its suites: {', '.join(entry.suites)})"
            )
    return tuple(
        dataclasses.replace(entry, suites=tuple(suite for suite in entry.suites if suite in suites))
        for entry in entries
    )
