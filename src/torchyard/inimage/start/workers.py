"""pytest-xdist workers sized to the device: one per GPU, each seeing only its own; none on the CPU.

On the CPU the suites' work is compiling and lowering, which already uses every core: extra workers
only add start-up (each imports torch and warms its own compiler). With several GPUs, each worker takes
one device through the accelerator's visible-device variable, set before torch initializes the device.
Tests are grouped by case (`--dist loadgroup`), so a worker makes a case's reference once and reuses its
warm compiler state for every backend of that case; the controller merges what the workers report.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Mapping, MutableMapping, Sequence
from typing import TYPE_CHECKING

from torchyard import contract
from torchyard.names import DEVICE_FACTS

if TYPE_CHECKING:
    import pytest

# Where a runner may have given the job its devices under another name the same runtime reads (`aliases`), a
# worker picks from that list, or it would pick a device that is not the job's.
VISIBLE: dict[str, str] = {name: facts.visible for name, facts in DEVICE_FACTS.items() if facts.visible is not None}
ALIASES: dict[str, tuple[str, ...]] = {name: facts.aliases for name, facts in DEVICE_FACTS.items() if facts.aliases}


def worker_count(accelerator: str, devices: int) -> int:
    """Workers to start: one per device where there are several GPUs; none (in-process) otherwise."""
    return devices if accelerator in VISIBLE and devices > 1 else 0


def xdist_args(argv: Sequence[str], accelerator: str, devices: int) -> list[str]:
    """pytest arguments that start the workers, unless the caller chose `-n` (or `--numprocesses`) already."""
    chosen = any(arg == "-n" or arg.startswith(("-n", "--numprocesses")) for arg in argv)
    workers = worker_count(accelerator, devices)
    return [] if chosen or workers == 0 else ["-n", str(workers), "--dist", "loadgroup"]


def xdist_plugin_args(env: Mapping[str, str] = os.environ) -> list[str]:
    """`-p xdist.plugin` where plugin autoloading is off (torchyard's suites alone) and xdist is installed:
    workers must still start where there are several GPUs."""
    if not env.get(contract.AUTOLOAD_OFF):
        return []
    return ["-p", "xdist.plugin"] if importlib.util.find_spec("xdist") is not None else []


def is_controller(config: pytest.Config) -> bool:
    """Whether this process runs the session (in-process, or as xdist's controller), not an xdist worker."""
    return not hasattr(config, "workerinput")


def worker_id(config: pytest.Config) -> str:
    """This process's xdist worker ("gw0", ...), or "main" where it is none."""
    return str(getattr(config, "workerinput", {}).get("workerid", "main"))


def pin_worker_device(accelerator: str, worker: str, env: MutableMapping[str, str] = os.environ) -> None:
    """In worker `gwN`, make only the N-th visible device visible (the N-th of what the container got)."""
    variable = VISIBLE.get(accelerator)
    if variable is None or not worker.startswith("gw"):
        return
    index = int(worker[2:])
    given = next((env[name] for name in (variable, *ALIASES.get(accelerator, ())) if name in env), "")
    visible = [item for item in given.split(",") if item]
    env[variable] = visible[index % len(visible)] if visible else str(index)


def device_count(accelerator: str) -> int:
    if accelerator not in VISIBLE:
        return 0
    import torch

    return torch.accelerator.device_count() if torch.accelerator.is_available() else 0
