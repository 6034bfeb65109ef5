"""Test helpers for chunked serving without Ray: a runner that merges waiting chunks as
``@serve.batch`` does, and cancelling a request while its first chunk runs."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Sequence
from typing import Any


class MergingRunner:
    """A runner (``runner=`` of a serving's request method) that, every 10 ms, hands whatever is
    waiting to `run` in one call, as ``@serve.batch`` merges a replica's queue. `order` records
    each call's chunk costs."""

    def __init__(self, run: Callable[[Sequence[Any]], Sequence[Any]]):
        self.run = run
        self.queue: list[tuple[Any, asyncio.Future]] = []
        self.order: list[list[int]] = []

    async def __call__(self, work: Any) -> Any:
        fut = asyncio.get_running_loop().create_future()
        self.queue.append((work, fut))
        return await fut

    async def serve(self, rounds: int = 50, window_s: float | None = None) -> None:
        """Merge and run what is waiting, `rounds` times (cancel the task to stop earlier): every
        10 ms, or with `window_s`, as ``@serve.batch`` does: `window_s` after the first chunk
        reaches an empty queue."""
        for _ in range(rounds):
            if window_s is None:
                await asyncio.sleep(0.01)
            else:
                while not self.queue:
                    await asyncio.sleep(0.001)
                await asyncio.sleep(window_s)
            if self.queue:
                batch, self.queue = self.queue[:], []
                self.order.append([w.cost for w, _ in batch])
                for (_, fut), reply in zip(batch, self.run([w for w, _ in batch])):
                    fut.set_result(reply)


async def cancel_while_first_chunk_runs(request: Awaitable[Any], calls: list[Any],
                                        release: threading.Event) -> None:
    """Start `request`, cancel it once the engine has been called (`calls` not empty; the call
    blocks until `release`), then let the running chunk finish."""
    import pytest

    task = asyncio.ensure_future(request)
    while not calls:
        await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    release.set()
    await asyncio.sleep(0.2)


def assert_only_the_running_chunk_was_wasted(stats: dict, wasted: int, dropped: int) -> None:
    """The ledger after :func:`cancel_while_first_chunk_runs`: the running chunk (`wasted` in
    the ledger's unit) was finished for nobody, the rest (`dropped`) never computed, nothing is
    in flight, all engine time went to the cancelled chunk and part of it ran after the cancel."""
    import pytest

    assert stats["wasted"] == wasted and stats["dropped"] == dropped
    assert stats["done"] == 0 and stats["in_flight"] == 0
    assert stats["wasted_s"] == pytest.approx(stats["busy_s"])
    assert 0 < stats["orphan_s"] < stats["wasted_s"]  # the call went on after the cancel
