"""Fair sharing of a model replica between requests, and no orphan work, for every endpoint whose
requests cut into chunks (NLL items by tokens, NLI dialogues by pairs).

A request is admitted as a list of chunks, each costing about the endpoint's chunk size in its
unit of work. :func:`run_in_turn` hands them to the replica's runner (a ``@serve.batch`` method)
in order, sending the next chunk as soon as the engine call of the previous one begins: every
request has at most one chunk running and one waiting in the replica's queue. A batch therefore
merges one chunk of each waiting request (round-robin), a small request admitted behind a large
one waits for about one chunk, not for all of it, and the replica never idles between two chunks
of a request (the next one is already queued when a call ends).

When the request is cancelled (the client went away, or the gateway's deadline passed and it
cancelled the call), its chunks not yet sent are never computed and its queued chunk is removed
by Serve (``dropped``); a chunk whose engine call is running is marked ``cancelled``, and the
engine stops computing it at its next forward pass or layer (:mod:`dialscore_server.scheduling.cancellation`).
Engine time spent on chunks cancelled by the end of their call is ``wasted`` (their answers are
never delivered); the part of it that ran after the cancel is ``orphan``: time nobody waited for.
:class:`WorkLedger` counts work in its unit and time in :class:`WorkStats` and the
``dialscore_work_*`` metrics; ``orphan_s / busy_s`` is the share of replica time nobody waited
for, ``wasted_s / busy_s`` adds the time spent on a request before its client left.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Generic, Literal, TypeVar

from dialscore_server import metrics
from dialscore_server.contract.errors import ServiceError
from dialscore_server.contract.reply import BatchReport, Reply
from dialscore_server.scheduling.cancellation import CallGuard

__all__ = ["Chunk", "ChunkReplies", "EngineThread", "WorkLedger", "WorkStats", "abandoned_reply",
           "run_in_turn"]

T = TypeVar("T")
R = TypeVar("R")
C = TypeVar("C", bound="Chunk")
How = Literal["done", "wasted", "dropped"]


@dataclass(kw_only=True)
class Chunk:
    """One chunk of an admitted request; endpoints' chunk classes inherit it and define `cost`,
    its work in the ledger's unit (at least 1). What this module records on it: `started`: its
    engine call began; `cancelled`: nobody waits for it any more, since `cancelled_at`
    (``time.perf_counter``); `on_start`: called once, from the engine's thread, when its engine
    call begins."""

    started: bool = False
    cancelled: bool = False
    cancelled_at: float = 0.0
    on_start: Callable[[], None] | None = field(default=None, repr=False)

    @property
    def cost(self) -> int:
        raise NotImplementedError


@dataclass
class WorkStats:
    """What a replica computed, in its `unit` and in seconds of engine time (see the module
    docstring): `done`, `wasted`, `dropped` and `in_flight` work; `busy_s` engine time, of which
    `wasted_s` went to chunks cancelled by the end of their call and `orphan_s` ran after their
    cancel (:meth:`WorkLedger.call`); `chunks` computed in `calls` engine calls."""

    unit: str
    done: int = 0
    wasted: int = 0
    dropped: int = 0
    in_flight: int = 0
    busy_s: float = 0.0
    wasted_s: float = 0.0
    orphan_s: float = 0.0
    chunks: int = 0
    calls: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def snapshot(self) -> dict[str, float | str]:
        with self._lock:
            return {k: v for k, v in vars(self).items() if not k.startswith("_")}


class WorkLedger:
    """The work accounting of one model replica, in `unit` ("tokens", "pairs"); `model` labels
    the metrics."""

    def __init__(self, model: str, unit: str):
        self.model, self.unit = model, unit
        self.stats = WorkStats(unit)

    def admitted(self, chunks: Sequence[Chunk]) -> None:
        cost = sum(c.cost for c in chunks)
        with self.stats._lock:
            self.stats.in_flight += cost
        metrics.WORK_IN_FLIGHT.labels(self.model, self.unit).inc(cost)

    def call(self, chunks: Sequence[C], compute: Callable[[CallGuard], R]
             ) -> tuple[R, float] | None:
        """One engine call for `chunks`: ``compute(guard)`` runs it, with a guard over the
        chunks' indices (a chunk is wanted until it is cancelled; see
        :mod:`dialscore_server.scheduling.cancellation`), and the call is accounted (:meth:`_called`).
        Returns its value and duration in seconds, or None without calling the engine when every
        chunk is already cancelled (nobody waits for any of them)."""
        if all(c.cancelled for c in chunks):
            return None
        for c in chunks:
            c.started = True
            callback, c.on_start = c.on_start, None
            if callback is not None:
                callback()
        guard = CallGuard(
            lambda k: not chunks[k].cancelled,
            cancelled_at=lambda k: chunks[k].cancelled_at if chunks[k].cancelled else None)
        start = time.perf_counter()
        value = compute(guard)
        end = time.perf_counter()
        self._called(chunks, start, end, guard)
        return value, end - start

    def _called(self, chunks: Sequence[Chunk], start: float, end: float, guard: CallGuard) -> None:
        """Account one engine call of `chunks` from `start` to `end` (``time.perf_counter``). The
        guard's clock holds the engine seconds spent on each chunk and the part of those after
        its cancel; the call's time outside its passes (all of it, for an engine without a clock)
        is shared by cost over the whole call. *Wasted* time: spent on chunks cancelled by the
        end of the call (their answers are never delivered); *orphan* time: the part of it after
        the cancel, when nobody waited any more."""
        compute_s = end - start
        total = sum(c.cost for c in chunks) or 1
        per_chunk = [(guard.seconds.get(k, 0.0), guard.seconds_after_cancel.get(k, 0.0))
                     for k in range(len(chunks))]
        rest = max(0.0, compute_s - sum(t for t, _ in per_chunk))
        wasted = orphan = 0.0
        for c, (t, late) in zip(chunks, per_chunk):
            if c.cancelled:
                share = rest * c.cost / total
                wasted += t + share
                if compute_s > 0:
                    late += share * (end - min(end, max(start, c.cancelled_at))) / compute_s
                orphan += late
        with self.stats._lock:
            self.stats.busy_s += compute_s
            self.stats.calls += 1
            self.stats.chunks += len(chunks)
            self.stats.wasted_s += wasted
            self.stats.orphan_s += orphan
        metrics.WORK_SECONDS.labels(self.model, "busy").inc(compute_s)
        metrics.WORK_SECONDS.labels(self.model, "wasted").inc(wasted)
        metrics.WORK_SECONDS.labels(self.model, "orphan").inc(orphan)

    def finish(self, chunks: Sequence[Chunk], how: How) -> None:
        cost = sum(c.cost for c in chunks)
        if not cost:
            return
        with self.stats._lock:
            self.stats.in_flight -= cost
            setattr(self.stats, how, getattr(self.stats, how) + cost)
        metrics.WORK_IN_FLIGHT.labels(self.model, self.unit).dec(cost)
        if how == "done":
            metrics.WORK_DONE.labels(self.model, self.unit).inc(cost)
        else:
            metrics.WORK_ABANDONED.labels(self.model, self.unit, how).inc(cost)


@dataclass
class ChunkReplies(Generic[T]):
    """What :func:`run_in_turn` got: each chunk's value in order (or the first error), the summed
    engine time of its chunks, the rest of the request's time in the replica (queue), the most
    requests one of its calls merged, and the statistics of the calls whose report came with one
    of these chunks (each call's report comes with exactly one chunk of that call)."""

    values: list[T]
    error: Reply[T] | None = None
    compute_s: float = 0.0
    queue_s: float = 0.0
    batch_requests: int = 0
    batches: list[tuple[BatchReport, int]] = field(default_factory=list)


class EngineThread(Generic[C, T]):
    """The one long-lived thread that runs a replica's engine calls, ``run(chunks)`` (one reply
    per chunk).

    A replica's engine calls never overlap (Serve runs one batch at a time), so one thread is
    enough; keeping it the same thread keeps one OpenMP thread team for PyTorch's CPU kernels
    (each OS thread that calls into them starts a team of its own: calls hopping between
    ``asyncio.to_thread``'s pool threads would start several) and the thread's own settings
    (``torch.set_num_threads`` is per thread)."""

    def __init__(self, run: Callable[[Sequence[C]], list[Reply[T]]]) -> None:
        self._run = run
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="dialscore-engine")

    async def call(self, chunks: Sequence[C]) -> list[Reply[T]]:
        """``run(chunks)`` on the engine thread, awaited (what a batching runner calls)."""
        return await asyncio.get_running_loop().run_in_executor(self._pool, self._run, chunks)

    async def run_alone(self, chunk: C) -> Reply[T]:
        """The runner of a serving used without ``@serve.batch`` (in-process, tests): each chunk
        is its own call, one at a time as a replica runs its batches (a request's next chunk,
        sent when the current one begins, waits its turn)."""
        return (await self.call([chunk]))[0]


def abandoned_reply() -> Reply:
    """The reply for a chunk cancelled during its engine call (nobody reads it)."""
    return Reply(error=ServiceError("timeout", "the request was cancelled; its remaining work was "
                                               "dropped"))


async def run_in_turn(chunks: Sequence[C], run: Callable[[C], Awaitable[Reply[T]]],
                      ledger: WorkLedger) -> ChunkReplies[T]:
    """Send `chunks` to `run` in order, each as soon as the previous one's engine call begins
    (see the module docstring), and gather their replies in order. An error reply stops the
    request (its other chunks are dropped) and is returned as `error`. Cancelling the caller
    drops what is left and marks the chunks already in an engine call as cancelled."""
    ledger.admitted(chunks)
    out: ChunkReplies[T] = ChunkReplies([])
    loop = asyncio.get_running_loop()
    sent: list[tuple[asyncio.Task[Reply[T]], asyncio.Event]] = []
    begun = time.perf_counter()

    def send(chunk: C) -> None:
        began = asyncio.Event()
        chunk.on_start = lambda: loop.call_soon_threadsafe(began.set)
        task = asyncio.ensure_future(run(chunk))
        # A task given up on below must not log "exception never retrieved".
        task.add_done_callback(lambda t: t.cancelled() or t.exception())
        sent.append((task, began))

    def give_up(k: int, how_running: How) -> None:
        """Stop at chunk `k`: the sent ones are cancelled (`how_running` if their call began,
        else dropped), the rest dropped."""
        for j, (task, _) in enumerate(sent[k:], start=k):
            task.cancel()
            chunks[j].cancelled_at = time.perf_counter()
            chunks[j].cancelled = True
            ledger.finish([chunks[j]], how_running if chunks[j].started else "dropped")
        ledger.finish(chunks[len(sent):], "dropped")

    k = 0
    try:
        if chunks:
            send(chunks[0])
        for k, chunk in enumerate(chunks):
            task, began = sent[k]
            if k + 1 < len(chunks):
                if not task.done():  # queue the next chunk once this one's engine call begins
                    waiter = asyncio.ensure_future(began.wait())
                    try:
                        await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
                    finally:
                        waiter.cancel()
                if not task.done() or (task.exception() is None and task.result().error is None):
                    send(chunks[k + 1])
            reply = await task
            if reply.error is not None:
                ledger.finish([chunk], "dropped")
                give_up(k + 1, "wasted")
                out.error = reply
                return out
            ledger.finish([chunk], "done")
            out.values.append(reply.value)  # type: ignore[arg-type]
            out.compute_s += reply.compute_s
            out.batch_requests = max(out.batch_requests, reply.batch_requests)
            out.batches += reply.batches
    except asyncio.CancelledError:
        give_up(k, "wasted")
        raise
    except BaseException:  # the engine call failed: nothing more is computed for this request
        give_up(k, "dropped")
        raise
    # Chunks overlap in the queue (the next waits while the current runs): the request's queue
    # time is its wall time outside its chunks' engine calls.
    out.queue_s = max(0.0, time.perf_counter() - begun - out.compute_s)
    return out
