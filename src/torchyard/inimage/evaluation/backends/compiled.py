"""torch.compile with inductor, proven to have run compiled code: each compile starts from a compiler state of its
own, and every call of the compiled module must run at least one graph inductor compiled. A frame dynamo runs
eagerly (past its recompile limit, skipped, under `torch.compiler.disable`) computes eager's numbers; a result
made of such calls would pass without judging the compiler, so it raises `NotCompiled` with dynamo's reason.
Graph breaks stay allowed: a call that runs compiled graphs around a break ran compiled code."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch

NOT_COMPILED = "not compiled: "  # how a result's reason begins where its calls ran no compiled graph


class NotCompiled(Exception):
    """A call of a compiled module ran no graph inductor compiled; the message is dynamo's reason, in a line."""


class Tally:
    """The graphs inductor compiled for one module, counted as they run, and dynamo's records since the compile
    began (its compilation metrics, and the reasons it gave up on a frame)."""

    def __init__(self, *, counting: bool = True) -> None:
        from torch._dynamo.utils import counters, get_compilation_metrics

        self.counting = counting
        self.ran = 0
        self.calls = 0
        self._metrics_before = tuple(get_compilation_metrics())
        self._gave_up_before = dict(counters["unimplemented"])

    def checked(self, function: Callable[..., Any]) -> Callable[..., Any]:
        """`function` (which calls the compiled module), raising `NotCompiled` for a call that ran no compiled
        graph; the calls are numbered across every function this tally checks. As it is where nothing counts."""
        if not self.counting:
            return function

        @functools.wraps(function)
        def call(*args: Any, **kwargs: Any) -> Any:
            before = self.ran
            self.calls += 1
            result = function(*args, **kwargs)
            if self.ran == before:
                raise NotCompiled(self.why(f"call {self.calls} of the compiled module"))
            return result

        return call

    def why(self, what: str) -> str:
        """Dynamo's reason that `what` ran no compiled graph, from what it recorded since the compile began."""
        from torch._dynamo.utils import counters, get_compilation_metrics

        new = [m for m in get_compilation_metrics() if not any(m is old for old in self._metrics_before)]
        for metrics in reversed(new):
            reason = str(getattr(metrics, "fail_reason", None) or "").strip()
            if reason:
                return f"{what} ran eagerly: dynamo gave up on {_frame(metrics)}: {reason.splitlines()[0]}"
        gave_up = [
            reason.strip().splitlines()[0]
            for reason, count in counters["unimplemented"].items()
            if count > self._gave_up_before.get(reason, 0)
        ]
        if gave_up:
            return f"{what} ran eagerly: dynamo gave up: {gave_up[-1]}"
        empty = [m for m in new if getattr(m, "graph_op_count", None) == 0]
        if empty:
            return (
                f"{what} ran eagerly: dynamo traced {_frame(empty[0])} into no graph (what it calls runs eagerly: "
                "torch.compiler.disable, or no tensor operation)"
            )
        return (
            f"{what} ran eagerly: dynamo compiled no frame for it (a frame it skips, or one under "
            "torch.compiler.disable)"
        )


def _frame(metrics: Any) -> str:
    name, filename, line = (getattr(metrics, key, None) for key in ("co_name", "co_filename", "co_firstlineno"))
    return f"{name} ({filename}:{line})" if name else "a frame"


def inductor_backend(mode: str, dynamic: bool | None, tally: Tally) -> Any:
    """The backend `torch.compile(backend="inductor", mode=mode)` makes (torch's own wrapper, so its mode's
    options, its equality and its reset are inductor's), whose compiled graphs count their runs into `tally`."""
    wrapper: Any = torch._TorchCompileInductorWrapper  # fenced by selftests/test_compiled.py

    class Counted(wrapper):  # type: ignore[misc]
        __name__ = "inductor"  # as torch.compile names it to dynamo's minifier

        def __call__(self, model: Any, inputs: Any, **options: Any) -> Any:
            compiled = super().__call__(model, inputs, **options)

            def counted(*args: Any, **kwargs: Any) -> Any:
                tally.ran += 1
                return compiled(*args, **kwargs)

            # Its attributes (a boxed calling convention above all) are the compiled graph's.
            functools.update_wrapper(counted, compiled, assigned=(), updated=("__dict__",))
            return counted

    return Counted(None if mode == "default" else mode, None, dynamic)


def compile_counted(
    module: torch.nn.Module, *, mode: str = "default", dynamic: bool | None = None, fullgraph: bool = False
) -> tuple[Callable[..., Any], Tally]:
    """`module` under torch.compile with inductor in `mode`, from a fresh compiler state (no recompile budget or
    cached frame shared with another case), and the tally its calls are checked with."""
    from torch._inductor.compiler_bisector import CompilerBisector

    torch._dynamo.reset()
    if CompilerBisector.get_backend():  # in a bisection, which puts its own backend in each step's compile
        plain = torch.compile(module, mode=None if mode == "default" else mode, dynamic=dynamic, fullgraph=fullgraph)
        return plain, Tally(counting=False)
    tally = Tally()
    backend = inductor_backend(mode, dynamic, tally)
    return torch.compile(module, backend=backend, dynamic=dynamic, fullgraph=fullgraph), tally
