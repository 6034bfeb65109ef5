"""The one thread that builds a replica's engine and runs its engine calls and health probe."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")


class EngineThread:
    """Runs everything that touches the engine on one long-lived thread, one at a time in the
    order submitted: its construction (:meth:`run_now`), its engine calls and its health probe
    (:meth:`submit`, awaited from the event loop).

    One thread keeps one OpenMP thread team for PyTorch's CPU kernels. Each OS thread that runs a
    parallel kernel starts a team of its own, and once a process holds more OpenMP threads than
    it has cores, libgomp (PyTorch's OpenMP) stops spinning between parallel regions (its
    throttled ``GOMP_SPINCOUNT``): every kernel then pays a thread wake-up. An engine built and
    warmed on one thread and called on another runs its small calls about half as fast
    (``docs/benchmarks/fairness.md``); so the engine is built here too. The thread also keeps
    its own settings (``torch.set_num_threads`` is per thread), and it is what keeps the
    engine's state (the NLL engine's context cache) touched by one thread only.

    :attr:`busy`, :attr:`at_work_s` and :attr:`failed` say what the thread is doing, for how
    long, and how its last finished call ended, for the health check
    (:meth:`~dialscore_server.scheduling.serving.ChunkedServing.check_health`). `clock` times
    the call at work (seconds, monotonic; tests pass one they advance)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="dialscore-engine")
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
    def failed(self) -> BaseException | None:
        """What the last call to finish raised; None when it returned."""
        with self._lock:
            return self._failed

    def run_now(self, fn: Callable[..., T], *args: object) -> T:
        """``fn(*args)`` on the engine thread, after every call submitted before it, blocking the
        caller until it returns (for building the engine; never from an event loop)."""
        self._enter()
        try:
            done = self._pool.submit(self._tracked, fn, args)
        except BaseException:  # never reached the thread (the pool was shut down)
            self._leave()
            raise
        return done.result()

    async def submit(self, fn: Callable[..., T], *args: object) -> T:
        """``fn(*args)`` on the engine thread, after every call submitted before it."""
        self._enter()
        try:
            done = asyncio.get_running_loop().run_in_executor(self._pool, self._tracked, fn, args)
        except BaseException:  # never reached the thread (the pool was shut down)
            self._leave()
            raise
        return await done

    def _enter(self) -> None:
        with self._lock:
            self._in_flight += 1

    def _leave(self) -> None:
        with self._lock:
            self._in_flight -= 1

    def _tracked(self, fn: Callable[..., T], args: tuple[object, ...]) -> T:
        failed: BaseException | None = None
        with self._lock:
            self._started = self._clock()
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
