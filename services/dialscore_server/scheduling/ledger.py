"""The work accounting of one model replica: what it computed, for whom, and for nobody.

Work is counted in the endpoint's unit ("tokens" on NLL replicas, "pairs" on classifiers) and
engine time in seconds, in :class:`WorkStats` and the ``dialscore_work_*`` metrics:

* admitted work is ``in_flight`` until it is ``done`` (computed for a request still waiting),
  ``dropped`` (never computed: its request was cancelled first) or ``wasted`` (computed, or being
  computed, when its request was cancelled: the answer is never delivered);
* of the engine time (``busy_s``), ``wasted_s`` went to chunks cancelled by the end of their call
  and ``orphan_s`` is the part of that which ran after the cancel, when nobody waited any more.
  ``orphan_s / busy_s`` is the share of replica time nobody waited for.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal, TypeVar

from dialscore_server import metrics
from dialscore_server.scheduling.cancellation import CallGuard
from dialscore_server.scheduling.pause_points import now_less_pauses, paused_seconds
from dialscore_server.scheduling.chunks import Chunk

R = TypeVar("R")
#: How an admitted chunk ends.
How = Literal["done", "wasted", "dropped"]


@dataclass
class WorkStats:
    """What a replica computed (see the module docstring); `chunks` computed in `calls` engine
    calls."""

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
        """The fields as a dict, read under the lock."""
        with self._lock:
            return {k: v for k, v in vars(self).items() if not k.startswith("_")}


class WorkLedger:
    """The work accounting of one model replica, in `unit`; `model` labels the metrics."""

    def __init__(self, model: str, unit: str):
        self.model, self.unit = model, unit
        self.stats = WorkStats(unit)

    def admitted(self, chunks: Sequence[Chunk]) -> None:
        cost = sum(c.cost for c in chunks)
        with self.stats._lock:
            self.stats.in_flight += cost
        metrics.WORK_IN_FLIGHT.labels(self.model, self.unit).inc(cost)
        metrics.WORK_ADMITTED.labels(self.model, self.unit).inc(cost)

    def call(self, chunks: Sequence[Chunk], compute: Callable[[CallGuard], R]
             ) -> tuple[R, float] | None:
        """One engine call for `chunks`: ``compute(guard)`` runs it, with a guard over the
        chunks' indices (a chunk is wanted until it is cancelled), and the call is accounted.
        Returns its value and duration in seconds (without the time it paused at its pause
        points: :mod:`~dialscore_server.scheduling.pause_points`), or None without calling the
        engine when every chunk is already cancelled."""
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
        start, paused = time.perf_counter(), paused_seconds()
        value = compute(guard)
        end = max(start, now_less_pauses(paused))
        self._account(chunks, start, end, guard)
        return value, end - start

    def _account(self, chunks: Sequence[Chunk], start: float, end: float, guard: CallGuard) -> None:
        """Account one engine call of `chunks` from `start` to `end` (``time.perf_counter``). The
        guard's clock holds the pass seconds spent on each chunk and the part of those after its
        cancel; the call's time outside its passes (all of it, for an engine without a clock) is
        shared by cost over the whole call."""
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
        """`chunks` leave the ledger as `how`."""
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
