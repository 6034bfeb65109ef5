"""Requests that arrive together meet the engine together.

A replica tokenizes each request off the event loop before its chunks enter the batch queue, and
a batch starts ``batch_wait_timeout_s`` (5 ms) after its first chunk arrives. Requests sent at
the same moment (a bulk client's concurrent requests) reach the replica a few milliseconds apart
and take tens of milliseconds each to tokenize, so an idle replica used to start the first one's
engine call alone; the others then waited for all of it and ran as a second, smaller call (fewer
rows per pass, a shared context computed twice; BENCHMARKS §4c).

:class:`Arrivals` closes that gap: a request that finishes tokenizing waits for the requests whose
tokenizing was already under way at that moment, for at most as long as its own tokenizing took.
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
    """The admissions in progress on one replica (used from its event loop)."""

    def __init__(self) -> None:
        self._admitting: set[asyncio.Future[None]] = set()

    async def admit(self, tokenize: Callable[[], T]) -> tuple[T, float, float]:
        """Run `tokenize` off the event loop, then wait for the admissions in progress when it
        finished (at most as long as it took). Returns its value, its seconds, and the seconds
        waited. An exception from `tokenize` is raised at once, without waiting."""
        mine: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._admitting.add(mine)
        start = time.perf_counter()
        try:
            value = await asyncio.to_thread(tokenize)
        finally:
            self._admitting.discard(mine)
            mine.set_result(None)
        took = time.perf_counter() - start
        others = set(self._admitting)
        if not others:
            return value, took, 0.0
        await asyncio.wait(others, timeout=took)
        return value, took, time.perf_counter() - start - took
