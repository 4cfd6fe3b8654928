"""`torchyard doctor`: what this host offers each accelerator, the exact `docker run` flags torchyard will
use, and for everything missing the command that fixes it. Runner operators run it once per runner."""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Mapping, Sequence

from torchyard.accelerators import ACCELERATORS
from torchyard.accelerators.protocol import PCI_VENDORS, HostFacts
from torchyard.errors import DockerUnavailableError, TorchyardError
from torchyard.host.engine import build_client, engine
from torchyard.host.facts import gather_host_facts
from torchyard.lock.resolve import uv_version
from torchyard.matrix.machine import MEMORY_SHARE, Machine
from torchyard.names import AcceleratorName
from torchyard.seal import Seal, default_memory, loosening, sealing_args
from torchyard.util import proc
from torchyard.util.markdown import markdown_table


def gpu_row(host: HostFacts) -> str:
    if host.gpu_vendors is None:
        return "unknown (no /sys/bus/pci)"
    return ", ".join(sorted(f"{PCI_VENDORS.get(vendor, vendor)} ({vendor})" for vendor in host.gpu_vendors)) or "none"


def doctor(
    accelerators: Sequence[AcceleratorName],
    machine: Machine,
    *,
    runner: proc.Runner = proc.run,
    env: Mapping[str, str] = os.environ,
) -> int:
    """Print the report, with the seal of this `machine`'s limits; non-zero when a requested accelerator (or
    the engine) is not usable here."""
    facts_rows: list[tuple[str, str]] = []
    problems: list[str] = []
    try:
        client = engine(env)
        version = client.version()
        facts_rows.append(("Docker engine", f"{version.get('Version', '?')} (API {version.get('ApiVersion', '?')})"))
    except DockerUnavailableError as error:
        client = None
        problems.append(str(error))
        facts_rows.append(("Docker engine", f"none answers: {error}"))
    try:
        cli = build_client(env, runner)
        builder = "docker buildx" if cli.builder == "buildx" else "engine's built-in BuildKit (DOCKER_BUILDKIT=1)"
        facts_rows.append(("image builder", f"{builder} via {cli.path} {cli.version}"))
    except TorchyardError as error:
        problems.append(str(error))
        facts_rows.append(("image builder", f"none: {error}"))
    try:
        facts_rows.append(("uv (locks, venvs)", f"{uv_version(runner)} at {proc.own_uv()}, torchyard's own"))
    except TorchyardError as error:
        problems.append(str(error))
        facts_rows.append(("uv (locks, venvs)", f"none: {error}"))
    host = gather_host_facts(client)
    facts_rows += [
        ("GPUs (PCI vendors)", gpu_row(host)),
        ("Docker runtimes", ", ".join(sorted(host.docker_runtimes)) or "-"),
        ("NVIDIA hook (--gpus)", "installed" if host.nvidia_hook else "absent"),
        ("CDI in the engine", "on" if host.cdi_enabled else "off"),
        ("CDI devices", ", ".join(sorted(host.cdi_devices)) or "-"),
        ("/dev/kfd", "present" if "/dev/kfd" in host.device_nodes else "absent"),
        ("/dev/dri", "present" if "/dev/dri" in host.device_nodes else "absent"),
        ("video group id", str(host.group_ids.get("video", "-"))),
        ("render group id", str(host.group_ids.get("render", "-"))),
    ]
    rows = []
    for name in accelerators:
        module = ACCELERATORS[name]
        missing = module.host_problems(host, env)
        flags = list(module.docker_run_args(host, env))
        rows.append(
            (
                name,
                "ready" if not missing and client else "not ready",
                shlex.join(flags) or "(none)",
                ", ".join(loosening(flags)) or "none",
                "; ".join(missing) or "-",
            )
        )
        problems += [f"{name}: {problem}" for problem in missing]
    sys.stdout.write(markdown_table(("host", "found"), facts_rows) + "\n")
    limits = machine.limits
    sealed = shlex.join(sealing_args(Seal(limits, default_memory(limits, host.memory_bytes, MEMORY_SHARE))))
    sys.stdout.write(f"Every test container is sealed first: {sealed}\n\n")
    headers = (
        "accelerator",
        "status",
        "device flags (after the seal)",
        "isolation it gives up",
        "missing, and the fix",
    )
    sys.stdout.write(markdown_table(headers, rows))
    return 1 if problems else 0
