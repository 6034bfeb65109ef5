"""How a batch worker's concurrent requests meet its engine: every chunk waiting when the engine
is free goes into one engine call, up to a budget, as Ray Serve's ``@serve.batch`` merges a
replica's queue (which needs a Serve replica; a batch worker is a Ray Data actor or a plain
process). The chunks of one call are the requests' own chunks (:mod:`dialscore_server.scheduling`),
so what an engine computes, and the numbers it returns, are the service's.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from dialscore_server.scheduling.chunks import Chunk, Outcome, Runner
from dialscore_server.scheduling.serving import EngineCall, RunnerFactory


def merge_waiting(budget: int, wait_s: float = 0.0) -> RunnerFactory:
    """A runner factory: the first chunk to arrive while the engine is idle starts a call after
    `wait_s` (letting its neighbours arrive); the call takes every chunk waiting then, in arrival
    order, up to `budget` counted in :attr:`Chunk.size` (at least one chunk, however large).
    Calls run one at a time; chunks that arrive during a call wait for the next."""

    def make(call: EngineCall[Any, Any]) -> Runner[Any, Any]:
        queue: list[tuple[Chunk, asyncio.Future]] = []
        state = {"draining": False}

        async def drain() -> None:
            try:
                while queue:
                    await asyncio.sleep(wait_s)
                    taken: list[tuple[Chunk, asyncio.Future]] = []
                    size = 0
                    while queue and (not taken or size + queue[0][0].size <= budget):
                        chunk, fut = queue.pop(0)
                        if not fut.cancelled():
                            taken.append((chunk, fut))
                            size += chunk.size
                    if not taken:
                        continue
                    try:
                        outcomes: Sequence[Outcome] = await call([c for c, _ in taken])
                    except Exception as exc:  # noqa: BLE001 - handed to each waiting request
                        for _, fut in taken:
                            if not fut.done():
                                fut.set_exception(exc)
                        continue
                    for (_, fut), outcome in zip(taken, outcomes):
                        if not fut.done():
                            fut.set_result(outcome)
            finally:
                state["draining"] = False

        async def run(chunk: Chunk) -> Outcome:
            fut = asyncio.get_running_loop().create_future()
            queue.append((chunk, fut))
            if not state["draining"]:
                state["draining"] = True
                asyncio.ensure_future(drain())
            return await fut

        return run

    return make
