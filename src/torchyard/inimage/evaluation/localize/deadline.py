"""The time bound of one localization, checked between its stages."""

from __future__ import annotations

import time


class GaveUp(Exception):
    """The time bound ran out before the stage this names."""


class Deadline:
    def __init__(self, seconds: float) -> None:
        self.seconds, self.started = seconds, time.perf_counter()

    @property
    def elapsed(self) -> float:
        return time.perf_counter() - self.started

    def check(self, stage: str) -> None:
        # A stage already started runs to its end (a lowering cannot be stopped half way).
        if self.elapsed > self.seconds:
            raise GaveUp(stage)
