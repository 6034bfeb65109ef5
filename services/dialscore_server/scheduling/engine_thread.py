"""The one thread that runs a replica's engine calls, and its health probe."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Generic, TypeVar

from dialscore_server.contract.options import CpuPriority
from dialscore_server.scheduling import pause_points
from dialscore_server.scheduling.cpu_priority import lower_thread_priority

logger = logging.getLogger("dialscore.serve")

A = TypeVar("A")
R = TypeVar("R")
T = TypeVar("T")


class _Progress:
    """When the call now running on the engine thread began or last reached a pause point
    (:attr:`at`, by `clock`); written by that thread (one float stored: no lock), read by the
    health check."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self.at = 0.0

    def mark(self) -> None:
        self.at = self.clock()


def _begin_engine_thread(priority: CpuPriority, progress: _Progress) -> None:
    """The engine thread's first step: its CPU priority, and its pause points marking `progress`."""
    lower_thread_priority(priority)
    pause_points.report_progress(progress.mark)


class EngineThread(Generic[A, R]):
    """Runs ``run(batch)``, and anything else that touches the engine (:meth:`submit`), on one
    long-lived thread, one at a time in the order submitted, awaited from the event loop.

    One thread keeps one OpenMP thread team for PyTorch's CPU kernels (each OS thread that calls
    into them starts a team of its own) and the thread's own settings (``torch.set_num_threads``
    is per thread), and it is what keeps the engine's state (the NLL engine's context cache)
    touched by one thread only. :attr:`busy`, :attr:`at_work_s`, :attr:`since_progress_s` and
    :attr:`failed` say what the thread is doing, for how long, when it last showed progress, and
    how its last finished call ended, for the health check
    (:meth:`~dialscore_server.scheduling.serving.ChunkedServing.check_health`). A call shows
    progress when it begins and at every :func:`~.pause_points.pause_point` it reaches (each
    forward pass and each layer of the engines' models). `clock` times the call at work
    (seconds, monotonic; tests pass one they advance). `priority` is the thread's CPU priority,
    which the thread sets itself before its first call (:func:`lower_thread_priority`)."""

    def __init__(self, run: Callable[[Sequence[A]], R],
                 clock: Callable[[], float] = time.monotonic,
                 priority: CpuPriority = "normal") -> None:
        self._run = run
        self._clock = clock
        self._progress = _Progress(clock)
        # The thread holds the _Progress, not this object: no reference keeps the pool alive.
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="dialscore-engine",
                                        initializer=_begin_engine_thread,
                                        initargs=(priority, self._progress))
        self._lock = threading.Lock()
        self._in_flight = 0
        self._started: float | None = None
        self._failed: BaseException | None = None

    @property
    def busy(self) -> bool:
        """Whether a submitted call is running on the thread or waiting for it (counted until the
        call returns on the thread, even when its awaiter was cancelled)."""
        with self._lock:
            return self._in_flight > 0

    @property
    def at_work_s(self) -> float | None:
        """Seconds since the call now running on the thread began (by `clock`); None when no
        call is running (calls waiting for the thread do not count)."""
        with self._lock:
            started = self._started
        return None if started is None else self._clock() - started

    @property
    def since_progress_s(self) -> float | None:
        """Seconds since the call now running on the thread began or last reached a pause point
        (by `clock`); None when no call is running."""
        with self._lock:
            running = self._started is not None
        return self._clock() - self._progress.at if running else None

    @property
    def failed(self) -> BaseException | None:
        """What the last call to finish raised; None when it returned."""
        with self._lock:
            return self._failed

    async def call(self, batch: Sequence[A]) -> R:
        """``run(batch)`` on the engine thread."""
        return await self.submit(self._run, batch)

    async def submit(self, fn: Callable[..., T], *args: object) -> T:
        """``fn(*args)`` on the engine thread, after every call submitted before it."""
        with self._lock:
            self._in_flight += 1
        try:
            done = asyncio.get_running_loop().run_in_executor(self._pool, self._tracked, fn, args)
        except BaseException:  # never reached the thread (the pool was shut down)
            with self._lock:
                self._in_flight -= 1
            raise
        return await done

    def _tracked(self, fn: Callable[..., T], args: tuple[object, ...]) -> T:
        failed: BaseException | None = None
        with self._lock:
            self._started = self._progress.at = self._clock()   # beginning is progress
        try:
            return fn(*args)
        except BaseException as exc:
            failed = exc
            raise
        finally:
            with self._lock:
                self._in_flight -= 1
                self._started = None
                self._failed = failed
