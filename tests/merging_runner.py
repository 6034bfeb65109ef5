"""Test helpers for chunked serving without Ray: a runner whose engine calls the test drives, and
waiting for a condition on the event loop without racing a clock."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import pytest

#: A hang guard, not a speed requirement: a condition that does not hold within this long means
#: the code under test is stuck.
HANG_S = 60.0


async def until(condition: Callable[[], bool], what: str, limit_s: float = HANG_S) -> None:
    """Yield to the event loop until `condition()` holds; fail naming `what` if it never does."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + limit_s
    while not condition():
        if loop.time() > deadline:
            pytest.fail(f"{what}: not within {limit_s:.0f} s (stuck)")
        await asyncio.sleep(0.001)


class MergingRunner:
    """A runner factory (``runner=`` of a serving) whose engine calls happen when the test says:
    chunks wait in :attr:`queue` until :meth:`step` hands everything waiting to one engine call,
    as a replica merges its queue when lanes are off (first in, first out; the lane policy and
    metric labels a serving passes are ignored). :attr:`order` records each call's chunk costs;
    :attr:`arrived` each chunk's cost in the order chunks reached the queue."""

    def __init__(self) -> None:
        self.call: Callable[[Sequence[Any]], Awaitable[list[Any]]] | None = None
        self.queue: list[tuple[Any, asyncio.Future]] = []
        self.order: list[list[int]] = []
        self.arrived: list[int] = []
        self.on_arrival: Callable[[Any], None] | None = None

    def __call__(self, call: Callable[[Sequence[Any]], Awaitable[list[Any]]], **_: Any):
        self.call = call
        return self._enqueue

    async def _enqueue(self, chunk: Any) -> Any:
        fut = asyncio.get_running_loop().create_future()
        self.queue.append((chunk, fut))
        self.arrived.append(chunk.cost)
        if self.on_arrival is not None:
            self.on_arrival(chunk)
        return await fut

    def live(self) -> int:
        """Chunks waiting whose requests still wait for them."""
        return sum(not f.cancelled() for _, f in self.queue)

    async def step(self) -> None:
        """One engine call for every chunk waiting now (cancelled ones are left out, as Serve
        drops a cancelled request from its queue)."""
        assert self.call is not None, "the runner was never given to a serving"
        batch = [(c, f) for c, f in self.queue if not f.cancelled()]
        self.queue = []
        if not batch:
            return
        self.order.append([c.cost for c, _ in batch])
        for (_, fut), outcome in zip(batch, await self.call([c for c, _ in batch])):
            if not fut.done():
                fut.set_result(outcome)

    async def drain(self, task: asyncio.Future) -> None:
        """Step whenever a chunk waits, until `task` is done."""
        while not task.done():
            await until(lambda: self.live() or task.done(), "a chunk or the end of the request")
            await self.step()


async def cancel_during_first_call(request: Awaitable[Any], calls: list[Any],
                                   release: threading.Event, ledger: Any) -> None:
    """Start `request`, cancel it once the engine holds its first call (`calls` not empty; the
    engine waits for `release`), then release the engine and wait until that call is accounted
    in `ledger`."""
    task = asyncio.ensure_future(request)
    await until(lambda: calls, "the first engine call")
    task.cancel()  # the client left while its first chunk runs
    with pytest.raises(asyncio.CancelledError):
        await task
    release.set()
    await until(lambda: ledger.stats.snapshot()["calls"] == 1, "the call's end")


def assert_only_the_running_chunk_was_wasted(stats: dict, wasted: int, dropped: int) -> None:
    """The ledger after a request was cancelled while its first chunk's engine call ran: the
    running chunk (`wasted` in the ledger's unit) was finished for nobody, the rest (`dropped`)
    never computed, nothing is in flight, all engine time went to the cancelled chunk and part
    of it ran after the cancel."""
    assert stats["wasted"] == wasted and stats["dropped"] == dropped
    assert stats["done"] == 0 and stats["in_flight"] == 0
    assert stats["wasted_s"] == pytest.approx(stats["busy_s"])
    assert 0 < stats["orphan_s"] < stats["wasted_s"]  # the call went on after the cancel
