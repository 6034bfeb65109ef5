"""Engine calls that stop computing what nobody waits for any more.

One engine call merges chunks of several requests (:mod:`dialscore_server.scheduling.chunks`). When one
of those requests is cancelled while the call runs (its client left, or its deadline passed), the
serving layer marks its chunk; the engine learns it through a :data:`Wanted` predicate over the
call's items and stops spending time on it at two grains:

* **between forward passes**, the engine drops the items nobody wants from every pass it has not
  started (a pass left with no item is skipped);
* **inside a pass**, :class:`LayerChecks` asks before every transformer layer whether any row of
  the pass is still wanted, and abandons the pass (:class:`PassAbandoned`) when none is; on an
  encoder whose layers take only hidden states and a padding mask (the NLI classifiers: BERT,
  RoBERTa), the rows nobody wants are also cut out of the pass's tensors before the layer
  (*shedding*, asked for per pass), so the rows of live requests go on alone.

So a cancelled request costs the replica at most one layer of one pass, except where its rows
share a decoder pass with live rows (the NLL engine: its passes carry key/value caches and
gathered positions, so such rows finish with the pass).

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

__all__ = ["CallGuard", "ItemClock", "LayerChecks", "PassAbandoned", "PassWatch", "Wanted",
           "all_wanted"]

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
    ``layer``) that hand each layer's inputs to the :class:`PassWatch` of the pass running on this
    thread (:meth:`watching`): it raises :class:`PassAbandoned` or sheds rows. Outside
    :meth:`watching` the hooks do nothing."""

    def __init__(self, model: Any):
        import torch

        self._local = threading.local()
        self.layers = 0
        for module in model.modules():
            if isinstance(module, torch.nn.ModuleList) and len(module) and \
                    len({type(m) for m in module}) == 1:
                for layer in module:
                    layer.register_forward_pre_hook(self._check, with_kwargs=True)
                    self.layers += 1

    def _check(self, _module: Any, args: tuple, kwargs: dict) -> tuple[tuple, dict] | None:
        watch = getattr(self._local, "watch", None)
        return None if watch is None else watch.before_layer(args, kwargs)

    @contextmanager
    def watching(self, watch: PassWatch | None) -> Iterator[None]:
        """Within the block, the layers of passes run on this thread go through `watch`."""
        previous = getattr(self._local, "watch", None)
        self._local.watch = watch
        try:
            yield
        finally:
            self._local.watch = previous


class PassWatch:
    """One running forward pass: the item of each of its rows, which rows are still in its
    tensors (:attr:`kept`, positions in the pass, in order) and when the others left.

    Before each layer (:meth:`before_layer`): no kept row wanted -> :class:`PassAbandoned`; with
    `shed`, rows no longer wanted are cut out of the layer's hidden states (dim 0) and padding
    mask (dim 0 when it has one row per pass row; a broadcast mask stays). Shedding stops for the
    pass (rows then finish with it) when a layer's inputs are not of that form: other tensors
    among its arguments, or shapes that do not match the rows."""

    def __init__(self, items: Sequence[int], wanted: Wanted, shed: bool = False):
        self.items = list(items)
        self.wanted = wanted
        self.shed = shed
        self.kept = list(range(len(self.items)))
        self.left_at: dict[int, float] = {}

    def before_layer(self, args: tuple, kwargs: dict) -> tuple[tuple, dict] | None:
        if not self.shed:
            if not any(self.wanted(self.items[p]) for p in self.kept):
                raise PassAbandoned
            return None
        live = [p for p in self.kept if self.wanted(self.items[p])]
        if not live:
            raise PassAbandoned
        if len(live) == len(self.kept) == len(self.items):
            return None  # nothing shed so far: the layer's inputs are the pass's own
        shed = _shed_rows(args, kwargs, self.kept, live, len(self.items))
        if shed is None:
            self.shed = False
            if len(self.kept) != len(self.items):  # rows already cut: the inputs must follow
                raise RuntimeError("a layer's inputs cannot follow the rows shed before it")
            return None
        now = time.perf_counter()
        for p in set(self.kept) - set(live):
            self.left_at[p] = now
        self.kept = live
        return shed


def _shed_rows(args: tuple, kwargs: dict, kept: list[int], live: list[int], full: int
               ) -> tuple[tuple, dict] | None:
    """A layer's (args, kwargs) with only the `live` rows (see :class:`PassWatch`), or None when
    the inputs are not hidden states + padding mask."""
    import torch

    if not args or not isinstance(args[0], torch.Tensor) or args[0].shape[0] != len(kept):
        return None
    mask = args[1] if len(args) > 1 else None
    rest = args[2:]
    if any(isinstance(a, torch.Tensor) for a in rest) or \
            any(isinstance(v, torch.Tensor) for v in kwargs.values()):
        return None
    where = {p: k for k, p in enumerate(kept)}
    hidden = args[0].index_select(0, torch.tensor([where[p] for p in live],
                                                  device=args[0].device))
    if isinstance(mask, torch.Tensor):
        if mask.shape[0] == full:  # the encoder hands every layer the pass's own mask
            mask = mask.index_select(0, torch.tensor(live, device=mask.device))
        elif mask.shape[0] != 1:
            return None
    elif mask is not None:
        return None
    return (hidden, mask, *rest), kwargs


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
               end: float, ends: Sequence[float] | None = None) -> None:
        """Share the wall time from `start` to `end` among `items`, in proportion to weight x
        the time each item stayed in the pass (until its entry in `ends`, default `end`)."""
        if not items:
            return
        w = _weights(weights, len(items))
        stay = [max(0.0, e - start) for e in ends] if ends is not None else [end - start] * len(w)
        load = [x * d for x, d in zip(w, stay)]
        total, seconds = sum(load), max(0.0, end - start)
        if total <= 0:
            return
        for i, x, d in zip(items, load, stay):
            share = seconds * x / total
            self.seconds[i] = self.seconds.get(i, 0.0) + share
            at = self._cancelled_at(i) if self._cancelled_at else None
            if at is not None and at < start + d and d > 0:
                late = share * (start + d - max(start, at)) / d
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
        if any(self.wanted(i) for i in items):
            return True
        self._root().skipped += len(items)
        return False

    def charge(self, items: Sequence[int], weights: Sequence[float] | None, start: float,
               end: float, ends: Sequence[float] | None = None) -> None:
        """Share the wall time from `start` to `end` among `items` (see :meth:`ItemClock.charge`);
        a child's index splits its share equally among its owners."""
        if self._parent is None:
            self.clock.charge(items, weights, start, end, ends)
            return
        if self._owners is None:
            self._parent.charge(items, weights, start, end, ends)
            return
        w = _weights(weights, len(items))
        e = list(ends) if ends is not None else [end] * len(items)
        owners: list[int] = []
        shares: list[float] = []
        owner_ends: list[float] = []
        for r, x, t in zip(items, w, e):
            n = len(self._owners[r])
            owners += self._owners[r]
            shares += [x / n] * n
            owner_ends += [t] * n
        self._parent.charge(owners, shares, start, end, owner_ends)

    @contextmanager
    def forward(self, items: Sequence[int], weights: Sequence[float] | None = None,
                shed: bool = False) -> Iterator[PassWatch]:
        """Run one pass computing `items` (weights: positions per item, for the clock). Raises
        :class:`PassAbandoned` from inside the pass once none of `items` is wanted; with `shed`
        (encoders only, see :class:`PassWatch`) rows nobody wants leave the pass at the next
        layer. Yields the pass's watch: after the pass, ``watch.kept`` are the positions (in
        `items`) of the rows in its outputs, in order."""
        watch = PassWatch(items, self.wanted, shed)
        start = time.perf_counter()
        try:
            if self.checks is None or not self.interruptible:
                yield watch
            else:
                with self.checks.watching(watch):
                    yield watch
        except PassAbandoned:
            self._root().abandoned_passes += 1
            raise
        finally:
            end = time.perf_counter()
            self.charge(items, weights, start, end,
                        [watch.left_at.get(p, end) for p in range(len(items))])
