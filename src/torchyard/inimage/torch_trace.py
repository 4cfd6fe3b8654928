"""pytest's log handlers kept off torch's structured trace."""

from __future__ import annotations

import logging

TORCH_TRACE = "torch.__trace"  # torch's structured trace (TORCH_TRACE=<dir> writes it), never propagated


def detach_pytest_from_torch_trace() -> None:
    """pytest (9.1) attaches its log handlers to every logger that does not propagate, torch's structured
    trace among them: torch then builds a trace record for every compile event (it builds none while that
    logger has no handler), and pytest shows each as an empty `DEBUG torch.__trace` line. Its handlers are
    detached there once pytest has attached them, for each phase of each test (its own removal is then a
    no-op); torch's own handler stays."""
    trace = logging.getLogger(TORCH_TRACE)
    for handler in [handler for handler in trace.handlers if type(handler).__module__.startswith("_pytest.")]:
        trace.removeHandler(handler)
