"""Fair sharing of a model replica between requests, and no orphan work, for every endpoint whose
requests cut into chunks (NLL items by tokens, NLI dialogues by pairs).

A request is admitted as a list of chunks, each costing about the endpoint's chunk size in its
unit of work. :func:`run_in_turn` hands them to the replica's runner (a ``@serve.batch`` method)
one at a time, waiting for each before sending the next, so every waiting request has at most one
chunk in the replica's queue: a batch merges one chunk of each waiting request (round-robin), and
a small request admitted behind a large one waits for about one chunk, not for all of it.

When the request is cancelled (the client went away, or the gateway's deadline passed and it
cancelled the call), its chunks not yet sent are never computed (``dropped``); a chunk still
queued is removed by Serve; only the chunk already running finishes, for nobody (``wasted``).
:class:`WorkLedger` counts both, in its unit, in :class:`WorkStats` and the ``dialscore_work_*``
metrics; ``wasted_s / busy_s`` is the share of replica time nobody waited for.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Generic, Literal, Protocol, TypeVar

from dialscore_server import metrics
from dialscore_server.contract.reply import BatchReport, Reply

__all__ = ["Chunk", "ChunkReplies", "WorkLedger", "WorkStats", "run_in_turn"]

T = TypeVar("T")
C = TypeVar("C", bound="Chunk")
How = Literal["done", "wasted", "dropped"]


class Chunk(Protocol):
    """One chunk of an admitted request. `cost`: its work in the ledger's unit (at least 1);
    `started`/`cancelled` are set here: its engine call began; nobody waits for it any more."""

    cost: int
    started: bool
    cancelled: bool


@dataclass
class WorkStats:
    """What a replica computed, in its `unit` and in seconds of engine time (see the module
    docstring): `done`, `wasted`, `dropped` and `in_flight` work; `busy_s` and `wasted_s` engine
    time; `chunks` computed in `calls` engine calls."""

    unit: str
    done: int = 0
    wasted: int = 0
    dropped: int = 0
    in_flight: int = 0
    busy_s: float = 0.0
    wasted_s: float = 0.0
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

    def started(self, chunks: Sequence[Chunk]) -> None:
        """Mark `chunks` as running (their engine call begins)."""
        for c in chunks:
            c.started = True

    def called(self, chunks: Sequence[Chunk], compute_s: float) -> None:
        """One engine call computed `chunks` in `compute_s`: the share of cancelled chunks (by
        cost) is wasted time."""
        total = sum(c.cost for c in chunks) or 1
        with self.stats._lock:
            self.stats.busy_s += compute_s
            self.stats.calls += 1
            self.stats.chunks += len(chunks)
            self.stats.wasted_s += compute_s * sum(c.cost for c in chunks if c.cancelled) / total

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
    """What :func:`run_in_turn` got: each chunk's value in order (or the first error), summed
    engine and queue times, the most requests one of its calls merged, and the statistics of the
    calls whose report came with one of these chunks (each call's report comes with exactly one
    chunk of that call)."""

    values: list[T]
    error: Reply[T] | None = None
    compute_s: float = 0.0
    queue_s: float = 0.0
    batch_requests: int = 0
    batches: list[tuple[BatchReport, int]] = field(default_factory=list)


async def run_in_turn(chunks: Sequence[C], run: Callable[[C], Awaitable[Reply[T]]],
                      ledger: WorkLedger) -> ChunkReplies[T]:
    """Send `chunks` to `run` one after the other (see the module docstring). An error reply
    stops the request (its other chunks are dropped) and is returned as `error`. Cancelling the
    caller drops what is left and counts the running chunk as wasted."""
    ledger.admitted(chunks)
    out: ChunkReplies[T] = ChunkReplies([])
    k = 0
    try:
        for k, chunk in enumerate(chunks):
            sent = time.perf_counter()
            reply = await run(chunk)
            if reply.error is not None:
                ledger.finish(chunks[k:], "dropped")
                out.error = reply
                return out
            ledger.finish([chunk], "done")
            out.values.append(reply.value)  # type: ignore[arg-type]
            out.compute_s += reply.compute_s
            out.queue_s += max(0.0, time.perf_counter() - sent - reply.compute_s)
            out.batch_requests = max(out.batch_requests, reply.batch_requests)
            out.batches += reply.batches
    except asyncio.CancelledError:
        current = chunks[k]
        current.cancelled = True
        ledger.finish([current], "wasted" if current.started else "dropped")
        ledger.finish(chunks[k + 1:], "dropped")
        raise
    except BaseException:  # the engine call failed: nothing more is computed for this request
        ledger.finish(chunks[k:], "dropped")
        raise
    return out
