"""A verdict about a compiler is about compiled code (issue 68): every compiled result starts from a compiler state
of its own, so many cases of one model class each compile (dynamo's recompile limit once ran the later ones
eagerly, and a fault planted in inductor passed), and a call that ran no compiled graph fails as "not compiled"
with dynamo's reason, for inference and for the compiled training step alike."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from torchyard.inimage.cases import Case
from torchyard.inimage.evaluation.backends import compiled as compiled_module
from torchyard.inimage.evaluation.backends.compiled import NOT_COMPILED, NotCompiled, compile_counted
from torchyard.inimage.evaluation.harness import evaluate
from torchyard.inimage.evaluation.training import TrainBackend, step
from torchyard.inimage.plugin.verdicts import ran
from torchyard.inimage.selftests.planted import RUN_DEVICE, TOLERANCES, wrong_tanh_pass

pytestmark = pytest.mark.harness("compile", "parity", "train")


class Tanh(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.linear(x))


def disabled() -> torch.nn.Module:
    """`Tanh` with its forward under `torch.compiler.disable`, made when a test asks: the decorator imports
    dynamo, which a run that compiles nothing must not (it makes inductor's cache folder)."""

    class Disabled(Tanh):
        @torch.compiler.disable  # type: ignore[untyped-decorator]
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.tanh(self.linear(x))

    return Disabled()


def inputs(rows: int) -> Callable[[torch.Generator], tuple[torch.Tensor]]:
    return lambda g: (torch.randn(rows, 8, generator=g),)


def test_the_counted_backend_is_inductor_as_torch_compile_makes_it() -> None:
    """The fence on torch's own wrapper (`torch._TorchCompileInductorWrapper`): a counted compile computes what
    `torch.compile(backend="inductor")` computes, bit for bit, counts each graph it runs, and keeps the mode's
    options."""
    assert hasattr(torch, "_TorchCompileInductorWrapper"), f"torch {torch.__version__} renamed inductor's wrapper"
    module = Tanh().to(RUN_DEVICE)
    x = torch.randn(4, 8, device=RUN_DEVICE)
    counted, tally = compile_counted(module)
    with torch.no_grad():
        ours = tally.checked(counted)(x)
        assert tally.ran == 1, tally.ran
        torch._dynamo.reset()
        theirs = torch.compile(module, backend="inductor")(x)
    assert torch.equal(ours, theirs)
    modes = compiled_module.inductor_backend("max-autotune-no-cudagraphs", None, compiled_module.Tally())
    assert modes.config.get("max_autotune") is True and modes.compiler_name == "inductor", modes.config


def test_twelve_shapes_of_one_model_each_compile_and_the_last_ones_planted_fault_fails(tmp_path: Path) -> None:
    """The issue's case: twelve cases of one model at twelve batch sizes, at dynamo's own recompile limit (8),
    a wrong tanh planted in inductor for the last alone. Sharing one compiler state, cases 9-12 ran eagerly
    (`graphs: 0`) and the planted fault passed. Each must compile (graphs counted), the clean ones pass, and the
    last fail by its values."""
    results = []
    for rows in range(1, 13):
        planted = rows == 12
        with torch._inductor.config.patch(post_grad_custom_post_pass=wrong_tanh_pass() if planted else None):
            case = Case(f"tanh_{rows}", Tanh, inputs(rows))
            results.append(
                evaluate(
                    case, "inductor", device=RUN_DEVICE, dtype=torch.float32, tolerances=TOLERANCES, workdir=tmp_path
                )
            )
    *clean, last = results
    assert all(result.graphs == 1 and not result.not_compiled for result in results), [r.graphs for r in results]
    assert all(result.status == "passed" for result in clean), [(r.case, r.status, r.reason) for r in clean]
    assert last.status == "failed" and "relative L2 error" in last.reason, last.reason


def test_a_call_past_the_recompile_limit_is_not_compiled_and_says_why() -> None:
    """Within one result: a call whose frame dynamo runs eagerly (its recompile limit reached) is not compiled,
    with dynamo's reason."""
    with torch._dynamo.config.patch(recompile_limit=1, automatic_dynamic_shapes=False):
        compiled, tally = compile_counted(Tanh())
        checked = tally.checked(compiled)
        with torch.no_grad():
            checked(torch.randn(2, 8))
            with pytest.raises(NotCompiled, match=r"call 2 of the compiled module ran eagerly: .*recompile limit"):
                checked(torch.randn(3, 8))


def test_a_module_dynamo_does_not_compile_fails_as_not_compiled(tmp_path: Path) -> None:
    """`torch.compiler.disable` on the whole forward: eager's numbers under inductor's name. The result fails as
    not compiled (no localization: there is no compiled step), and the compile suite's rule does not pass it."""
    case = Case("disabled", disabled, inputs(4))
    result = evaluate(case, "inductor", device=RUN_DEVICE, dtype=torch.float32, tolerances=TOLERANCES, workdir=tmp_path)
    assert result.status == "failed" and result.reason.startswith(NOT_COMPILED), result.reason
    assert "call 1 of the compiled module ran eagerly" in result.not_compiled, result.not_compiled
    assert not ran(result) and result.diverges is None


def test_a_compiled_training_step_that_ran_eagerly_is_not_compiled() -> None:
    """The compiled training step is held to the same rule as inference: its forward must run compiled code."""
    case = Case("disabled", disabled, inputs(4))
    with pytest.raises(NotCompiled, match="ran eagerly"):
        step(case, TrainBackend(True, "sgd"), device=RUN_DEVICE, dtype=torch.float32, master=torch.float32)
