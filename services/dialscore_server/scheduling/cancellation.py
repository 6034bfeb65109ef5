"""Engine calls that stop computing what nobody waits for any more, between forward passes.

One engine call merges chunks of several requests (:mod:`dialscore_server.scheduling.chunks`). When
one of those requests is cancelled while the call runs (its client left, or its deadline passed),
the serving layer marks its chunk; the engine learns it through a :data:`Wanted` predicate over
the call's items and leaves the items nobody wants out of every forward pass it has not started
(a pass left with no item is skipped). A pass already running finishes: a cancelled request costs
the replica at most the rest of the passes that had started when it was cancelled.

:class:`CallGuard` carries the predicate through one engine call, and its clock
(:class:`ItemClock`) attributes each pass's wall time to the items computed in it, in proportion
to the positions computed for them, so the work ledger can say how much of a call went to work
that was cancelled by its end, and how much of that ran after the cancel.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

from dialscore_server.scheduling.pause_points import now_less_pauses, pause_point, paused_seconds

__all__ = ["CallGuard", "ItemClock", "Wanted", "all_wanted"]

#: Is the item at this index of the engine call still wanted by someone?
Wanted = Callable[[int], bool]


def all_wanted(_: int) -> bool:
    """The predicate of a call nobody can cancel."""
    return True


def _weights(weights: Sequence[float] | None, n: int) -> list[float]:
    """`weights` as a list, or n equal weights when none (or none positive) are given."""
    return list(weights) if weights is not None and sum(weights) > 0 else [1.0] * n


class ItemClock:
    """Seconds of one engine call per item index: each timed pass's wall time shared among its
    items in proportion to their weights (positions computed for them). With `cancelled_at`
    (index -> when nobody wanted the item any more, on ``time.perf_counter``'s clock, or None),
    :attr:`after` holds the part of each item's seconds that ran after that moment."""

    def __init__(self, cancelled_at: Callable[[int], float | None] | None = None) -> None:
        self.seconds: dict[int, float] = {}
        self.after: dict[int, float] = {}
        self._cancelled_at = cancelled_at

    def charge(self, items: Sequence[int], weights: Sequence[float] | None, start: float,
               end: float) -> None:
        """Share the wall time from `start` to `end` among `items`, in proportion to weight."""
        if not items:
            return
        w = _weights(weights, len(items))
        total, seconds = sum(w), max(0.0, end - start)
        for i, x in zip(items, w):
            share = seconds * x / total
            self.seconds[i] = self.seconds.get(i, 0.0) + share
            at = self._cancelled_at(i) if self._cancelled_at else None
            if at is not None and at < end and end > start:
                self.after[i] = self.after.get(i, 0.0) + share * (end - max(start, at)) / (end - start)


class CallGuard:
    """One engine call's view of its items: which are still `wanted` (index -> bool) and the
    seconds spent on each.

    The serving layer creates the root guard over the indices it knows (the call's chunks) and
    reads :attr:`seconds` after the call; an engine that computes something else (the items of
    the chunks, distinct rows of pairs) works on a child guard (:meth:`over`) whose indices map
    to the root's, so that its wanted checks and its clock speak in the caller's terms.

    Engines keep only wanted items when a pass is formed (:meth:`keep`) and run each pass inside
    :meth:`forward`, which times it."""

    def __init__(self, wanted: Wanted | None = None,
                 cancelled_at: Callable[[int], float | None] | None = None):
        self._wanted: Wanted = wanted or all_wanted
        self.clock = ItemClock(cancelled_at)
        self._parent: CallGuard | None = None
        self._owners: Sequence[Sequence[int]] | None = None  # None: the parent's own indices
        self.skipped = 0

    def over(self, owners: Sequence[Sequence[int]] | None) -> CallGuard:
        """A guard for indices ``0..len(owners)-1``, index r standing for this guard's indices
        ``owners[r]`` (None: the same indices): wanted when any of them is, its time split
        equally among them. Counts go to the root."""
        child = CallGuard()
        child._parent, child._owners = self, owners
        return child

    @property
    def seconds(self) -> dict[int, float]:
        """Pass seconds per index (of the root, for any guard of the family)."""
        return self._root().clock.seconds

    @property
    def seconds_after_cancel(self) -> dict[int, float]:
        """The part of :attr:`seconds` that ran after the index was cancelled (root's
        ``cancelled_at``)."""
        return self._root().clock.after

    def _root(self) -> CallGuard:
        return self if self._parent is None else self._parent._root()

    def wanted(self, i: int) -> bool:
        if self._parent is None:
            return self._wanted(i)
        if self._owners is None:
            return self._parent.wanted(i)
        return any(self._parent.wanted(j) for j in self._owners[i])

    def keep(self, items: Sequence[int]) -> list[int]:
        """The wanted ones of `items`, in order (the others are counted as skipped)."""
        kept = [i for i in items if self.wanted(i)]
        self._root().skipped += len(items) - len(kept)
        return kept

    def any_wanted(self, items: Sequence[int]) -> bool:
        """Is any of `items` wanted? When none is, they are counted as skipped."""
        if any(self.wanted(i) for i in items):
            return True
        self._root().skipped += len(items)
        return False

    def charge(self, items: Sequence[int], weights: Sequence[float] | None, start: float,
               end: float) -> None:
        """Share the wall time from `start` to `end` among `items` (see :meth:`ItemClock.charge`);
        a child's index splits its share equally among its owners."""
        if self._parent is None:
            self.clock.charge(items, weights, start, end)
            return
        if self._owners is None:
            self._parent.charge(items, weights, start, end)
            return
        w = _weights(weights, len(items))
        owners: list[int] = []
        shares: list[float] = []
        for r, x in zip(items, w):
            n = len(self._owners[r])
            owners += self._owners[r]
            shares += [x / n] * n
        self._parent.charge(owners, shares, start, end)

    @contextmanager
    def forward(self, items: Sequence[int], weights: Sequence[float] | None = None
                ) -> Iterator[None]:
        """Time one pass computing `items` (weights: positions per item, for the clock). A
        yielding call may pause before the pass and between its layers
        (:mod:`~dialscore_server.scheduling.pause_points`); the seconds paused are not charged."""
        pause_point()
        start, paused = time.perf_counter(), paused_seconds()
        try:
            yield
        finally:
            self.charge(items, weights, start, now_less_pauses(paused))
