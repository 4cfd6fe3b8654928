"""What the backends' runs share: timing on the device, exporting a case, and the artifact cache's key."""

from __future__ import annotations

import contextlib
import importlib
import io
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import torch

from torchyard.inimage.cases import Call, Case
from torchyard.inimage.evaluation.cache.keys import UNKEYED_BY_FAULT, Unkeyable, artifact_key
from torchyard.inimage.evaluation.errors import stage, torchyards_fault
from torchyard.inimage.evaluation.trees import Leaf, leaves

T = TypeVar("T")
WARMUP = 2
REPEATS = 7


def first_use(steps: tuple[str, ...]) -> None:
    """A backend's `FIRST_USE`: each module imported, each `module:function` called."""
    for step in steps:
        module, _, function = step.partition(":")
        imported = importlib.import_module(module)
        if function:
            getattr(imported, function)()


def synchronize(device: torch.device) -> None:
    """Wait for the device's queued work, so a timer around it measures the work, not the launch."""
    if device.type != "cpu":  # torch's device-generic API: CUDA (and ROCm through it), XPU, MPS
        torch.accelerator.synchronize(device)


def timed(function: Callable[[], T], device: torch.device) -> tuple[T, float]:
    started = time.perf_counter()
    result = function()
    synchronize(device)
    return result, time.perf_counter() - started


def run_all(
    invoke: Callable[[Call], object], calls: list[Call], device: torch.device
) -> tuple[list[list[Leaf]], float, float]:
    """Each call once (outputs and total seconds), then the median latency of the first call."""
    outputs, total = [], 0.0
    for call in calls:
        result, seconds = timed(lambda call=call: invoke(call), device)  # type: ignore[misc]
        outputs.append(leaves(result))
        total += seconds
    for _ in range(WARMUP):
        invoke(calls[0])
    synchronize(device)
    samples = [timed(lambda: invoke(calls[0]), device)[1] for _ in range(REPEATS)]
    return outputs, total, statistics.median(samples) * 1e3


def called(function: Callable[..., object]) -> Callable[[Call], object]:
    """`function` taking a `Call`."""
    return lambda call: function(*call.args, **call.kwargs)


def dynamic_shapes(case: Case) -> object:
    return case.dynamic_shapes() if case.dynamic_shapes else None


def export_program(case: Case, module: torch.nn.Module, call: Call) -> torch.export.ExportedProgram:
    """torch.export of the case, with what it prints kept to once: a failing export prints its partial FX
    graph to stderr from each of its nested wrappers (twice in torch 2.14), so stderr is held and the
    repeats dropped."""
    held, graph = io.StringIO(), None
    try:
        with contextlib.redirect_stderr(held), stage("torch.export"):
            return torch.export.export(module, call.args, kwargs=dict(call.kwargs), dynamic_shapes=dynamic_shapes(case))
    except Exception as error:
        graph = getattr(error, "partial_fx_graph", None)
        raise
    finally:
        sys.stderr.write(printed_once(held.getvalue(), graph))


def printed_once(printed: str, graph: object) -> str:
    """`printed` with all but the last print of `graph` (None: as it is) left out."""
    if graph is None:
        return printed
    repeated = f"{graph}\n"
    return printed.replace(repeated, "", max(printed.count(repeated) - 1, 0))


@dataclass(frozen=True)
class LoweringKey:
    """The artifact cache's key of one lowering (`digest`), or why there is none: the case opts out
    (`Case(cache=False)`: the cache is "off" for it) or cannot be keyed ("unkeyable")."""

    digest: str | None
    why: str = ""
    opted_out: bool = False

    def notes(self, state: str) -> dict[str, str]:
        """What a run's notes say of the cache, which did `state` (`ArtifactCache.materialize`'s)."""
        if self.digest is not None or state == "off":  # keyed, or the whole run turned the cache off
            return {"cache": state}
        return {"cache": "off" if self.opted_out else "unkeyable", "cache_why": self.why}


def lowering_key(
    case: Case, backend: str, module: torch.nn.Module, call: Call, device: torch.device, *, options: dict[str, Any]
) -> LoweringKey:
    """The artifact cache's key for lowering `module` for `call`; none where the case opts out, or where it
    cannot be keyed (the key code's own errors included: the case runs uncached, saying why)."""
    if not case.cache:
        return LoweringKey(None, f"case {case.name!r} sets cache=False", opted_out=True)
    shapes = dynamic_shapes(case)  # the case's own code: its error is the case's, as torch.export would meet it
    try:
        dtype = next(
            (value.dtype for value in module.state_dict().values() if value.is_floating_point()), torch.float32
        )
        return LoweringKey(
            artifact_key(
                case_name=case.name,
                backend=backend,
                options=options,
                module=module,
                inputs=(call.args, dict(call.kwargs)),
                dynamic_shapes=shapes,
                device=device,
                dtype=dtype,
            )
        )
    except Unkeyable as error:
        return LoweringKey(None, str(error))
    except Exception as error:  # around the key code: reading the module's dtype
        return LoweringKey(None, f"{UNKEYED_BY_FAULT}{torchyards_fault(error)}")
