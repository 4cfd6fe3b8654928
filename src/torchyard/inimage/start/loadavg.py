"""Whether the machine was loaded while the run timed its backends: speed figures measured while other work
shared the CPUs can be off by any factor (591x over eager, once), so the report withholds what they cannot
support.

The rule, measured and recorded in env.json (`load`): the 1-minute load average is sampled as the run starts
(before its tests: others' work then) and as it ends (its own processes included, `workers` of them). What
others ran is the larger of the first, and the second less the run's own workers; the machine was loaded
when that and the run's workers together exceed its CPUs: the run could not have had the cores it used to
itself.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

LoadAverage = Callable[[], tuple[float, float, float]]


def sample(load_average: LoadAverage = os.getloadavg) -> list[float] | None:
    """The 1-, 5- and 15-minute load averages, or None where the platform has none."""
    try:
        return [round(value, 2) for value in load_average()]
    except (OSError, AttributeError):
        return None


def worker_count(numprocesses: object) -> int:
    """pytest-xdist's `-n` as the run's processes: 1 without workers."""
    return numprocesses if isinstance(numprocesses, int) and numprocesses > 0 else 1


def machine_load(
    start: list[float] | None, end: list[float] | None, *, cpus: int | None, workers: int
) -> dict[str, Any]:
    """What env.json records of the machine's load over the run, and whether its speed figures stand."""
    recorded: dict[str, Any] = {"cpus": cpus, "start": start, "end": end, "workers": workers}
    if start is None or end is None or not cpus:
        return recorded | {"loaded": None, "why": "no load average on this platform: speed figures unchecked"}
    others = max(start[0], end[0] - workers)
    loaded = others + workers > cpus
    recorded |= {"others": round(others, 2), "loaded": loaded}
    if loaded:
        recorded["why"] = (
            f"other work averaged {others:.1f} runnable processes beside this run's {workers} on {cpus} CPUs "
            f"(1-minute load average {start[0]:.2f} at the start, {end[0]:.2f} at the end)"
        )
    return recorded


def loaded_why(manifest: Mapping[str, Any]) -> str:
    """Why the run's speed figures cannot be trusted ("" where they can, or where nothing was recorded)."""
    load = manifest.get("load")
    if not isinstance(load, Mapping) or not load.get("loaded"):
        return ""
    return str(load.get("why", "the machine was loaded"))
