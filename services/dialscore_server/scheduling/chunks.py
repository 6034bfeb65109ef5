"""Chunks and turn-taking: a request's chunks go to the runner one after the other, each as soon
as the previous one's engine call begins.

Every request has at most one chunk running and one waiting in the replica's queue, so an engine
call merges one chunk of each waiting request (round-robin), a small request admitted behind a
large one waits for about one chunk, not for all of it, and the replica never idles between two
chunks of a request (the next one is already queued when a call ends).

When the request is cancelled (the client went away, or the gateway's deadline passed and it
cancelled the call), its chunks not yet sent are never computed and its queued chunk is removed
from the queue (``dropped``); a chunk whose engine call is running is marked ``cancelled``, and
the engine leaves its items out of the passes it has not started
(:mod:`~dialscore_server.scheduling.cancellation`); its engine time is ``wasted``
(:mod:`~dialscore_server.scheduling.ledger`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Generic, TypeVar

from dialscore_server.contract.errors import ServiceError
from dialscore_server.contract.priority import Lane

if TYPE_CHECKING:
    from dialscore_server.scheduling.ledger import How, WorkLedger

@dataclass(kw_only=True)
class Chunk:
    """One chunk of an admitted request; endpoints' chunk classes inherit it and define `cost`
    (its work in the ledger's unit, at least 1) and `size` (what one engine call's budget counts,
    at least 1; by default its cost).

    What the scheduling layer records on it: `started`: its engine call began; `cancelled`:
    nobody waits for it any more, since `cancelled_at` (``time.perf_counter``); `on_start`:
    called once, from the engine's thread, when its engine call begins; `lane`: its request's
    lane (:mod:`~dialscore_server.scheduling.lanes`), set at admission."""

    lane: Lane = "interactive"
    started: bool = False
    cancelled: bool = False
    cancelled_at: float = 0.0
    on_start: Callable[[], None] | None = field(default=None, repr=False)

    @property
    def cost(self) -> int:
        raise NotImplementedError

    @property
    def size(self) -> int:
        return self.cost




V = TypeVar("V")
C = TypeVar("C", bound=Chunk)


@dataclass
class Outcome(Generic[V]):
    """One chunk's answer from an engine call: its `value`, None when the chunk was cancelled
    while the call ran and was not computed to the end (nobody reads it); `compute_s`: the
    duration of the engine call that computed it."""

    value: V | None
    compute_s: float


#: A chunk in, its outcome out (the engine call that computes it may merge other chunks).
Runner = Callable[[C], Awaitable[Outcome[V]]]


@dataclass
class Turns(Generic[V]):
    """What :func:`take_turns` got: each chunk's value in order, the summed engine time of its
    chunks' calls (`compute_s`) and the rest of the request's time in the replica (`queue_s`)."""

    values: list[V] = field(default_factory=list)
    compute_s: float = 0.0
    queue_s: float = 0.0


def _abandoned() -> ServiceError:
    return ServiceError("timeout", "the request was cancelled; its remaining work was dropped")


async def take_turns(chunks: Sequence[C], runner: Runner[C, V], ledger: WorkLedger) -> Turns[V]:
    """Send `chunks` to `runner` in order, each as soon as the previous one's engine call begins,
    and gather their values in order. Cancelling the caller drops what is left and marks the
    chunks already in an engine call as cancelled; a failing engine call drops the rest of the
    request and raises."""
    ledger.admitted(chunks)
    out: Turns[V] = Turns()
    loop = asyncio.get_running_loop()
    sent: list[tuple[asyncio.Task[Outcome[V]], asyncio.Event]] = []
    begun = time.perf_counter()

    def send(chunk: C) -> None:
        began = asyncio.Event()
        chunk.on_start = lambda: loop.call_soon_threadsafe(began.set)
        task = asyncio.ensure_future(runner(chunk))
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
                if not task.done() or (task.exception() is None
                                       and task.result().value is not None):
                    send(chunks[k + 1])
            outcome = await task
            if outcome.value is None:  # left out of its call: only a cancelled chunk is
                break
            ledger.finish([chunk], "done")
            out.values.append(outcome.value)
            out.compute_s += outcome.compute_s
    except asyncio.CancelledError:
        give_up(k, "wasted")
        raise
    except BaseException:  # the engine call failed: nothing more is computed for this request
        give_up(k, "dropped")
        raise
    if len(out.values) < len(chunks):
        if not chunks[k].cancelled:
            ledger.finish([chunks[k]], "wasted")
        give_up(k + 1, "wasted")
        raise _abandoned()
    # Chunks overlap in the queue (the next waits while the current runs): the request's queue
    # time is its wall time outside its chunks' engine calls.
    out.queue_s = max(0.0, time.perf_counter() - begun - out.compute_s)
    return out
