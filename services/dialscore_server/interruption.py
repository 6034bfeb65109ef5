"""Engine calls that stop computing what nobody waits for any more.

One engine call merges chunks of several requests (:mod:`dialscore_server.fair_chunks`). When one
of those requests is cancelled while the call runs (its client left, or its deadline passed), the
serving layer marks its chunk; the engine learns it through a :data:`Wanted` predicate over the
call's items and stops spending time on it at two grains:

* **between forward passes**, the engine drops the items nobody wants from every pass it has not
  started (a pass left with no item is skipped);
* **inside a pass**, :class:`LayerChecks` asks before every transformer layer whether any row of
  the pass is still wanted, and abandons the pass (:class:`PassAbandoned`) when none is.

So a cancelled request costs the replica at most one layer of one pass when it shares no pass
with live work; rows of a pass shared with live rows are finished with them (cutting rows out of
a running pass would change its shapes mid-model).

:class:`CallGuard` carries both through one engine call, and its clock (:class:`ItemClock`)
attributes each pass's wall time to the items computed in it, in proportion to their positions in
the pass, so the serving layer can say how much of a call went to work that was cancelled by its
end.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

__all__ = ["CallGuard", "ItemClock", "LayerChecks", "PassAbandoned", "Wanted", "all_wanted"]

#: Is the item at this index of the engine call still wanted by someone?
Wanted = Callable[[int], bool]


def all_wanted(_: int) -> bool:
    """The predicate of a call nobody can cancel."""
    return True


class PassAbandoned(Exception):
    """Raised inside a forward pass once none of its rows is wanted; the pass's outputs are lost."""


class LayerChecks:
    """Forward pre-hooks on every layer of `model`'s layer stacks (each ``nn.ModuleList`` of
    modules of one class: GPT-2's ``h``, BART's encoder and decoder ``layers``, RoBERTa's
    ``layer``) that raise :class:`PassAbandoned` when the check of the pass running on this thread
    says so. Outside :meth:`watching` the hooks do nothing."""

    def __init__(self, model: Any):
        import torch

        self._local = threading.local()
        self.layers = 0
        for module in model.modules():
            if isinstance(module, torch.nn.ModuleList) and len(module) and \
                    len({type(m) for m in module}) == 1:
                for layer in module:
                    layer.register_forward_pre_hook(self._check)
                    self.layers += 1

    def _check(self, *_: Any) -> None:
        abandoned = getattr(self._local, "abandoned", None)
        if abandoned is not None and abandoned():
            raise PassAbandoned

    @contextmanager
    def watching(self, abandoned: Callable[[], bool] | None) -> Iterator[None]:
        """Within the block, the layers of passes run on this thread raise :class:`PassAbandoned`
        when ``abandoned()`` is true (None: never)."""
        previous = getattr(self._local, "abandoned", None)
        self._local.abandoned = abandoned
        try:
            yield
        finally:
            self._local.abandoned = previous


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
        """Share the wall time from `start` to `end` among `items`."""
        if not items:
            return
        w = list(weights) if weights is not None and sum(weights) > 0 else [1.0] * len(items)
        total, seconds = sum(w), max(0.0, end - start)
        for i, x in zip(items, w):
            share = seconds * x / total
            self.seconds[i] = self.seconds.get(i, 0.0) + share
            at = self._cancelled_at(i) if self._cancelled_at else None
            if at is not None and at < end and seconds > 0:
                late = share * (end - max(start, at)) / seconds
                self.after[i] = self.after.get(i, 0.0) + late


class CallGuard:
    """One engine call's view of its items: which are still `wanted` (index -> bool), the seconds
    spent on each, and the layer checks of the model running it (None: passes are only skipped
    between passes, never stopped inside).

    The serving layer creates the root guard over the indices it knows (the call's items) and
    reads :attr:`seconds` after the call; an engine that computes something else (pairs of jobs,
    distinct rows of pairs) works on a child guard (:meth:`over`) whose indices map to the
    root's, so that its wanted checks and its clock speak in the caller's terms.

    Engines keep only wanted items when a pass is formed (:meth:`keep`), run each pass inside
    :meth:`forward` and catch :class:`PassAbandoned`, which it raises (after charging the pass's
    time) when no row of the pass is wanted any more."""

    def __init__(self, wanted: Wanted | None = None, checks: LayerChecks | None = None,
                 cancelled_at: Callable[[int], float | None] | None = None):
        self._wanted: Wanted = wanted or all_wanted
        self.checks = checks
        self.clock = ItemClock(cancelled_at)
        self._parent: CallGuard | None = None
        self._owners: Sequence[Sequence[int]] | None = None  # None: the parent's own indices
        self.abandoned_passes = 0
        self.skipped = 0

    def over(self, owners: Sequence[Sequence[int]] | None, checks: LayerChecks | None = None
             ) -> CallGuard:
        """A guard for indices ``0..len(owners)-1``, index r standing for this guard's indices
        ``owners[r]`` (None: the same indices): wanted when any of them is, its time split equally
        among them; `checks` (default: this guard's) stop its passes. Counts go to the root."""
        child = CallGuard(checks=checks or self.checks)
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

    @property
    def interruptible(self) -> bool:
        """False for a guard nobody can cancel (no `wanted` anywhere up the family)."""
        if self._parent is not None:
            return self._parent.interruptible
        return self._wanted is not all_wanted

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
        return bool(self.keep(items)) if not any(self.wanted(i) for i in items) else True

    def charge(self, items: Sequence[int], weights: Sequence[float] | None, start: float,
               end: float) -> None:
        """Share the wall time from `start` to `end` among `items` in proportion to `weights`
        (equal without); a child's index splits its share equally among its owners."""
        if self._parent is None:
            self.clock.charge(items, weights, start, end)
            return
        if self._owners is None:
            self._parent.charge(items, weights, start, end)
            return
        w = list(weights) if weights is not None and sum(weights) > 0 else [1.0] * len(items)
        owners: list[int] = []
        shares: list[float] = []
        for r, x in zip(items, w):
            owners += self._owners[r]
            shares += [x / len(self._owners[r])] * len(self._owners[r])
        self._parent.charge(owners, shares, start, end)

    @contextmanager
    def forward(self, items: Sequence[int], weights: Sequence[float] | None = None
                ) -> Iterator[None]:
        """Run one pass computing `items` (weights: positions per item, for the clock); raises
        :class:`PassAbandoned` from inside the pass once none of `items` is wanted."""

        def abandoned() -> bool:
            return not any(self.wanted(i) for i in items)

        start = time.perf_counter()
        try:
            if self.checks is None or not self.interruptible:
                yield
            else:
                with self.checks.watching(abandoned):
                    yield
        except PassAbandoned:
            self._root().abandoned_passes += 1
            raise
        finally:
            self.charge(items, weights, start, time.perf_counter())
