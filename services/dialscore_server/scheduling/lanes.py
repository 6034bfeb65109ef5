"""Priority lanes: the replica's queue of chunks waiting for an engine call, and what each engine
call takes from it.

Every chunk carries its request's lane (:data:`~dialscore_server.contract.priority.Lane`,
``interactive`` or ``bulk``, decided at admission by :meth:`LanePolicy.lane_of`). Chunks wait in
a :class:`LaneQueue`, one first-in first-out queue per lane (each request has at most one chunk
waiting, so within a lane the engine calls still merge one chunk of every waiting request, the
turn-taking of :mod:`~dialscore_server.scheduling.chunks`). When the engine is free, the next
engine call takes (:meth:`LaneQueue.pick`):

* no interactive chunk waiting: bulk chunks, oldest first, up to the call's budget, or
  ``bulk_max_batch`` where set while interactive work is about (bulk has every call when nobody
  interactive waits; the smaller its calls, the sooner an interactive arrival gets the engine).
  With ``bulk_max_batch_hold_s`` set, the bound holds only while an interactive chunk waits or
  arrived within the last that many seconds (or, for a yielding bulk pool, an interactive
  request was on its device within them: the queue's `interactive_seen`): a replica with no
  interactive traffic merges bulk chunks up to the whole budget (one chunk of every waiting
  bulk request, each already cut to the bound at admission), so the bound costs bulk
  throughput only while it shortens an interactive wait;
* interactive chunks waiting: interactive chunks only, oldest first, up to the budget, except
  that while bulk chunks wait too, every ``bulk_every``-th such call starts with the oldest bulk
  chunk and fills the rest with interactive ones. Bulk is never starved: with interactive work
  continuously waiting it still gets at least one chunk in every ``bulk_every`` engine calls.

With lanes off (:attr:`LanePolicy.enabled` false) both lanes are one first-in first-out queue,
the replica's behaviour before lanes: every request the same share.

The budget of one call is ``max_batch_size`` in :attr:`Chunk.size
<dialscore_server.scheduling.chunks.Chunk.size>` (a chunk larger than that alone is a call of its
own), or one chunk per call (``max_batch_size=None``: the in-process runner). A call waits up to
``batch_wait_timeout_s`` after its oldest chunk arrived for more chunks to fill it, as Ray
Serve's ``@serve.batch`` does, and no longer than it takes to be full: a call that would take
bulk chunks only is full at ``bulk_max_batch``, so bulk calls cut small never wait to fill a
budget they cannot use. This queue takes that role in a replica because ``@serve.batch``
merges its queue first-in first-out and cannot put an interactive chunk before bulk ones.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from dialscore_server import metrics
from dialscore_server.contract.options import BULK_EVERY
from dialscore_server.contract.priority import LANES, Lane
from dialscore_server.scheduling.chunks import Chunk, Outcome

C = TypeVar("C", bound=Chunk)
V = TypeVar("V")

#: One engine call for a batch of chunks: one outcome per chunk, in order.
EngineCall = Callable[[Sequence[C]], Awaitable[list[Outcome[V]]]]


@dataclass(frozen=True)
class LanePolicy:
    """How one replica's engine shares its calls between the lanes.

    * `enabled`: interactive chunks go first (see the module docstring); off, one FIFO queue.
    * `bulk_every`: while both lanes wait, at least one of every `bulk_every` engine calls
      serves a bulk chunk (1: every call includes one).
    * `interactive_max_cost`: a request whose cost (summed over its chunks, in the ledger's unit)
      exceeds it is served in the bulk lane whatever it asks; None: no cap.
    * `bulk_max_batch`: with lanes on, an engine call of bulk chunks merges at most this much, in
      chunk sizes (a chunk larger than that alone is a call of its own; a serving that can cut
      its chunks finer cuts bulk requests to it at admission:
      :class:`~dialscore_server.scheduling.serving.ChunkedServing`'s `rechunk`), so an
      interactive request that arrives while it runs waits for less; None: the call's whole
      budget.
    * `bulk_max_batch_hold_s`: `bulk_max_batch` bounds a bulk call only while an interactive
      chunk waits or arrived within the last this many seconds (by the queue's clock); beyond
      that a bulk call merges up to the whole budget. None: the bound always holds.
    """

    enabled: bool = True
    bulk_every: int = BULK_EVERY
    interactive_max_cost: int | None = None
    bulk_max_batch: int | None = None
    bulk_max_batch_hold_s: float | None = None

    def __post_init__(self) -> None:
        if self.bulk_every < 1:
            raise ValueError("bulk_every must be at least 1")
        if self.interactive_max_cost is not None and self.interactive_max_cost < 0:
            raise ValueError("interactive_max_cost must not be negative")
        if self.bulk_max_batch is not None and self.bulk_max_batch < 1:
            raise ValueError("bulk_max_batch must be at least 1")
        if self.bulk_max_batch_hold_s is not None and self.bulk_max_batch_hold_s < 0:
            raise ValueError("bulk_max_batch_hold_s must not be negative")

    def lane_of(self, asked: Lane, cost: int) -> Lane:
        """The lane a request that asked for `asked` and costs `cost` is served in: bulk when
        asked, or when its cost exceeds :attr:`interactive_max_cost`."""
        if asked == "bulk":
            return "bulk"
        if self.interactive_max_cost is not None and cost > self.interactive_max_cost:
            return "bulk"
        return "interactive"


@dataclass
class _Waiting(Generic[C, V]):
    chunk: C
    future: asyncio.Future[Outcome[V]]
    arrived: float


@dataclass
class _Plan(Generic[C, V]):
    """The next engine call as :meth:`LaneQueue._plan` sees it: the chunks it would take, and
    whether it is `full`."""

    taken: list[_Waiting[C, V]]
    full: bool


@dataclass
class LaneCounts:
    """What a :class:`LaneQueue` served, per lane: engine calls that included the lane's chunks
    (`calls`), and the chunks and work (in the ledger's unit) they took."""

    calls: dict[str, int] = field(default_factory=lambda: dict.fromkeys(LANES, 0))
    chunks: dict[str, int] = field(default_factory=lambda: dict.fromkeys(LANES, 0))
    work: dict[str, int] = field(default_factory=lambda: dict.fromkeys(LANES, 0))


class LaneQueue(Generic[C, V]):
    """The runner of a :class:`~dialscore_server.scheduling.serving.ChunkedServing`: awaiting it
    with a chunk queues the chunk in its lane (``chunk.lane``) and returns the chunk's outcome
    once an engine call (`call`) computed it. Calls run one at a time, on the event loop the
    chunks are awaited from; each takes what :meth:`pick` chooses. A chunk whose waiter is
    cancelled leaves the queue without being computed.

    `model` and `unit` label the lane metrics (``dialscore_lane_*``). `clock` (seconds, never
    decreasing) times :attr:`LanePolicy.bulk_max_batch_hold_s`, from the last interactive chunk
    to arrive here or, later, the time `interactive_seen` returns (by the same clock; None:
    never): interactive work elsewhere that this queue's bulk calls should make way for (a
    yielding pool's device gate: :meth:`GatedCalls.interactive_seen_at
    <dialscore_server.scheduling.device_gate.GatedCalls.interactive_seen_at>`)."""

    def __init__(self, call: EngineCall[C, V], *, max_batch_size: int | None = None,
                 batch_wait_timeout_s: float = 0.0, policy: LanePolicy = LanePolicy(),
                 model: str = "", unit: str = "",
                 clock: Callable[[], float] = time.monotonic,
                 interactive_seen: Callable[[], float | None] | None = None) -> None:
        self._call = call
        self._interactive_seen = interactive_seen
        self.max_batch_size = max_batch_size
        self.batch_wait_timeout_s = batch_wait_timeout_s
        self.policy = policy
        self.model, self.unit = model, unit
        self._clock = clock
        #: When the last interactive chunk arrived (by `clock`); None: none yet.
        self._interactive_at: float | None = None
        self._lanes: dict[str, list[_Waiting[C, V]]] = {lane: [] for lane in LANES}
        self._fifo: list[_Waiting[C, V]] = []  # lanes off: one queue
        self._task: asyncio.Task[None] | None = None
        self._arrival = asyncio.Event()
        #: Engine calls in a row that left waiting bulk chunks out while interactive ones waited.
        self._bulk_skipped = 0
        self.counts = LaneCounts()

    # -- the runner ----------------------------------------------------------------------------

    async def __call__(self, chunk: C) -> Outcome[V]:
        loop = asyncio.get_running_loop()
        entry: _Waiting[C, V] = _Waiting(chunk, loop.create_future(), loop.time())
        if chunk.lane == "interactive":
            self._interactive_at = self._clock()
        (self._lanes[chunk.lane] if self.policy.enabled else self._fifo).append(entry)
        self._publish()
        if self._task is None or self._task.done():
            self._arrival = asyncio.Event()  # of this event loop
            self._task = loop.create_task(self._serve())
        self._arrival.set()
        try:
            return await asyncio.shield(entry.future)
        except asyncio.CancelledError:
            entry.future.cancel()  # left out of the calls not yet picked
            self._publish()
            raise

    # -- what waits ----------------------------------------------------------------------------

    def _queues(self) -> list[list[_Waiting[C, V]]]:
        return [self._fifo, *self._lanes.values()]

    def _prune(self) -> None:
        for q in self._queues():
            q[:] = [w for w in q if not w.future.done()]

    def waiting(self, lane: Lane | None = None) -> list[C]:
        """The chunks waiting now (of `lane`, or all), oldest first within each lane."""
        if lane is None:
            queues = self._queues()
        elif self.policy.enabled:
            queues = [self._lanes[lane]]
        else:
            queues = [[w for w in self._fifo if w.chunk.lane == lane]]
        return [w.chunk for q in queues for w in q if not w.future.done()]

    def _publish(self) -> None:
        for lane in LANES:
            metrics.LANE_WAITING.labels(self.model, self.unit, lane).set(
                sum(c.cost for c in self.waiting(lane)))

    # -- the policy ----------------------------------------------------------------------------

    def bulk_bounded(self) -> bool:
        """Whether a call of bulk chunks is held to :attr:`LanePolicy.bulk_max_batch` now: the
        bound is set, and its hold is unset, or an interactive chunk waits, or one arrived (or
        `interactive_seen` saw interactive work) within the hold."""
        hold = self.policy.bulk_max_batch_hold_s
        if self.policy.bulk_max_batch is None:
            return False
        if hold is None or self.waiting("interactive"):
            return True
        seen = [t for t in (self._interactive_at,
                            self._interactive_seen() if self._interactive_seen else None)
                if t is not None]
        return bool(seen) and self._clock() - max(seen) < hold

    def _fill(self, taken: list[_Waiting[C, V]], queue: Sequence[_Waiting[C, V]],
              bulk: bool = False) -> bool:
        """Add `queue`'s chunks to `taken`, oldest first, while they fit the call's budget
        (`bulk`: the bulk budget); whether the call is then full: a chunk of `queue` did not fit,
        or the budget is reached."""
        budget, cap = self.max_batch_size, self.policy.bulk_max_batch
        if bulk and budget is not None and cap is not None and self.bulk_bounded():
            budget = min(budget, cap)
        size = sum(w.chunk.size for w in taken)
        for w in queue:
            if taken and (budget is None or size + w.chunk.size > budget):
                return True
            taken.append(w)
            size += w.chunk.size
        return budget is not None and size >= budget

    def _plan(self) -> _Plan[C, V]:
        """What the next engine call would take now (see the module docstring), taking nothing."""
        self._prune()
        taken: list[_Waiting[C, V]] = []
        if not self.policy.enabled:
            return _Plan(taken, self._fill(taken, self._fifo))
        interactive, bulk = self._lanes["interactive"], self._lanes["bulk"]
        if not interactive:
            return _Plan(taken, self._fill(taken, bulk, bulk=True))
        if bulk and self._bulk_skipped + 1 >= self.policy.bulk_every:
            taken.append(bulk[0])
        return _Plan(taken, self._fill(taken, interactive))

    def pick(self) -> list[C]:
        """Take the chunks of the next engine call out of the queue (see the module docstring)
        and return them, in the order the call gets them; empty when nothing waits."""
        return [w.chunk for w in self._take()]

    def _take(self) -> list[_Waiting[C, V]]:
        taken = self._plan().taken
        if not self._lanes["interactive"] or any(w.chunk.lane == "bulk" for w in taken):
            self._bulk_skipped = 0  # bulk had the call, or no interactive chunk waited
        elif self._lanes["bulk"]:  # interactive chunks only, bulk left waiting
            self._bulk_skipped += 1
        chosen = {id(w) for w in taken}
        for q in self._queues():
            q[:] = [w for w in q if id(w) not in chosen]
        for lane in LANES:
            mine = [w.chunk for w in taken if w.chunk.lane == lane]
            if mine:
                self.counts.calls[lane] += 1
                self.counts.chunks[lane] += len(mine)
                self.counts.work[lane] += sum(c.cost for c in mine)
                metrics.LANE_WORK.labels(self.model, self.unit, lane).inc(sum(c.cost for c in mine))
        self._publish()
        return taken

    # -- the engine loop -----------------------------------------------------------------------

    async def _wait_to_fill(self) -> None:
        """Wait until the next engine call is full (:meth:`_plan`: a waiting chunk of the lane it
        draws from does not fit its budget, the bulk budget for a call of bulk chunks alone), or
        `batch_wait_timeout_s` after the oldest waiting chunk arrived."""
        if self.batch_wait_timeout_s <= 0 or self.max_batch_size is None:
            return
        loop = asyncio.get_running_loop()
        while True:
            plan = self._plan()
            if not plan.taken or plan.full:
                return
            live = [w for q in self._queues() for w in q]
            left = min(w.arrived for w in live) + self.batch_wait_timeout_s - loop.time()
            if left <= 0:
                return
            self._arrival.clear()
            try:
                await asyncio.wait_for(self._arrival.wait(), left)
            except asyncio.TimeoutError:
                return

    async def _serve(self) -> None:
        """Engine calls, one at a time, until nothing waits."""
        while True:
            await self._wait_to_fill()
            taken = self._take()
            if not taken:
                return
            try:
                outcomes: list[Any] = await self._call([w.chunk for w in taken])
            except BaseException as exc:  # noqa: BLE001 - every waiter of the call gets it
                for w in taken:
                    if not w.future.done():
                        w.future.set_exception(exc)
                if isinstance(exc, asyncio.CancelledError):
                    raise
                continue
            for w, outcome in zip(taken, outcomes):
                if not w.future.done():
                    w.future.set_result(outcome)
