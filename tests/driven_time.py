"""Time a test drives: a clock that moves only when the waiting side sleeps."""

from __future__ import annotations

from collections.abc import Callable


class DrivenTime:
    """A clock that moves only when the waiting side sleeps, and a sleep that runs the test's
    `on_sleep(n)` at the n-th call (from 1)."""

    def __init__(self, on_sleep: Callable[[int], None] = lambda n: None):
        self.now, self.sleeps, self.on_sleep = 0.0, 0, on_sleep

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps += 1
        self.now += seconds
        self.on_sleep(self.sleeps)
