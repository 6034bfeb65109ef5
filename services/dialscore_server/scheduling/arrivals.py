"""Requests that arrive together meet the engine together.

A replica admits each request (validates and tokenizes it) off the event loop before its chunks
enter the batch queue, and a batch starts ``batch_wait_timeout_s`` after its first chunk arrives.
Requests sent at the same moment (a bulk client's concurrent requests) reach the replica a few
milliseconds apart and take tens of milliseconds each to tokenize, so without a wait an idle
replica would start the first one's engine call alone; the others would then wait for all of it
and run as a second, smaller call (fewer rows per pass, a shared context computed twice).

:class:`Arrivals` closes that gap: a request that finishes admission waits for the admissions
that were already under way at that moment, for at most as long as its own admission took.
Requests admitted later never delay it, and the wait is bounded by work the request has already
paid for: a small request (about a millisecond of tokenizing) waits about a millisecond at most,
a bulk request (tens of milliseconds of tokenizing, seconds of engine time) a few percent of its
latency at most.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TypeVar

__all__ = ["Arrivals"]

T = TypeVar("T")


class Arrivals:
    """The admissions in progress on one replica (used from its event loop). `clock` measures
    how long an admission took (seconds; the bound of its wait)."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self._admitting: set[asyncio.Future[None]] = set()
        self._clock = clock
        #: Admissions that finished and are waiting for others now.
        self.waiting = 0

    @property
    def admitting(self) -> int:
        """Admissions under way now."""
        return len(self._admitting)

    async def admit(self, admit: Callable[[], T]) -> tuple[T, float, float]:
        """Run `admit` off the event loop, then wait for the admissions in progress when it
        finished (at most as long as it took). Returns its value, its seconds, and the seconds
        waited. An exception from `admit` is raised at once, without waiting."""
        mine: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._admitting.add(mine)
        start = self._clock()
        try:
            value = await asyncio.to_thread(admit)
        finally:
            self._admitting.discard(mine)
            mine.set_result(None)
        took = self._clock() - start
        others = set(self._admitting)
        if not others:
            return value, took, 0.0
        self.waiting += 1
        try:
            await asyncio.wait(others, timeout=took)
        finally:
            self.waiting -= 1
        return value, took, max(0.0, self._clock() - start - took)
