"""Which part of torch.compile makes a failing inductor result, through torch's own
`torch._inductor.compiler_bisector.CompilerBisector`: it compiles the case again under dynamo's backends in turn
(eager, aot_eager, with decompositions, inductor), then with inductor's subsystems switched off or bisected
(pre-grad, joint-graph and post-grad passes, config changes, lowerings), until the first that breaks the result.
Every step is a fresh compile (the bisector bypasses inductor's graph cache), so this is the costly one."""

from __future__ import annotations

import contextlib
import io
from collections.abc import Callable

import torch

from torchyard.inimage.cases import Case
from torchyard.inimage.evaluation.harness import make_reference
from torchyard.inimage.evaluation.localize.deadline import Deadline
from torchyard.inimage.evaluation.metrics import compare_values
from torchyard.inimage.evaluation.trees import leaves, to_device
from torchyard.inimage.start.tolerances import Bounds

# What the bisector's backends are, for a step it names without a subsystem: the stage before inductor where the
# compiled program first differs (torch._inductor.compiler_bisector.BISECTION_BACKENDS's order).
STAGES = {
    "eager": "torch.compile's captured graph, run without a compiler (the fault is in dynamo's trace)",
    "aot_eager": "AOTAutograd's graph, run without inductor",
    "aot_eager_decomp_partition": "AOTAutograd's decomposed and partitioned graph, run without inductor",
    "aot_eager_decomp_partition_crossref": "AOTAutograd's decomposed graph, each operator checked against eager",
}


def bisect_train(correct: Callable[[], bool], deadline: Deadline) -> str:
    """The step the bisector names for a training step (forward and backward through AOTAutograd): `correct`
    compiles and takes the step afresh and says whether it meets the float64 step."""

    def checked() -> bool:
        deadline.check("the next compile of the bisection")
        torch._dynamo.reset()
        return correct()

    return _bisect(checked)


def bisect_compile(
    case: Case,
    mode: str,
    *,
    device: torch.device,
    dtype: torch.dtype,
    bounds: Bounds,
    deadline: Deadline,
    batch: int = 0,
) -> str:
    """The backend and pass (or the lowering of one node) the bisector names for the case's call `batch`, in words;
    "" where every step meets the reference (the failure does not show on that call)."""
    call = case.calls()[batch]
    reference = make_reference(case, [call], device=device, dtype=dtype)
    if reference.error:
        raise RuntimeError(f"no reference: {reference.error}")
    module = case.fresh_module().to(dtype=dtype).to(device).eval()
    on_device = to_device(call, device, dtype)

    def correct() -> bool:
        deadline.check("the next compile of the bisection")
        torch._dynamo.reset()
        compiled = torch.compile(module, mode=mode or None)
        with torch.no_grad():
            outputs = leaves(compiled(*on_device.args, **on_device.kwargs))
        return all(
            compare_values(output, expected, output.dtype, bounds, "").passed
            for output, expected in zip(outputs, reference.outputs[0], strict=True)
            if isinstance(output, torch.Tensor) and isinstance(expected, torch.Tensor)
        )

    return _bisect(correct)


def _bisect(correct: Callable[[], bool]) -> str:
    """torch's bisector over `correct`, its answer in words ("" where every step is correct)."""
    from torch._inductor.compiler_bisector import CompilerBisector

    with contextlib.redirect_stdout(io.StringIO()):  # it prints each step
        found = CompilerBisector.do_bisect(correct)
    torch._dynamo.reset()
    if found is None:
        return ""
    if found.subsystem is None:
        return STAGES.get(found.backend, f"{found.backend}, no subsystem of it singled out")
    if found.subsystem == "lowerings":
        return f"{found.backend}: the generated kernel for node {found.debug_info}"
    what = f"{found.backend}: {found.subsystem}"
    if found.debug_info and found.debug_info != found.subsystem:
        what += f", {found.debug_info} (application {found.bisect_number})"
    return what
