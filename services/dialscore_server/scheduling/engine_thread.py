"""The one thread that runs a replica's engine calls."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Generic, TypeVar

A = TypeVar("A")
R = TypeVar("R")


class EngineThread(Generic[A, R]):
    """Runs ``run(batch)`` on one long-lived thread, awaited from the event loop.

    A replica's engine calls never overlap (Serve runs one batch at a time), so one thread is
    enough; keeping it the same thread keeps one OpenMP thread team for PyTorch's CPU kernels
    (each OS thread that calls into them starts a team of its own) and the thread's own settings
    (``torch.set_num_threads`` is per thread)."""

    def __init__(self, run: Callable[[Sequence[A]], R]) -> None:
        self._run = run
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="dialscore-engine")

    async def call(self, batch: Sequence[A]) -> R:
        """``run(batch)`` on the engine thread."""
        return await asyncio.get_running_loop().run_in_executor(self._pool, self._run, batch)
