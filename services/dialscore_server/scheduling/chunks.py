"""A chunk: the unit of a request that waits for an engine call."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass(kw_only=True)
class Chunk:
    """One chunk of an admitted request; endpoints' chunk classes inherit it and define `cost`
    (its work in the ledger's unit, at least 1) and `size` (what one engine call's budget counts,
    at least 1; by default its cost).

    What the scheduling layer records on it: `started`: its engine call began; `cancelled`:
    nobody waits for it any more, since `cancelled_at` (``time.perf_counter``); `on_start`:
    called once, from the engine's thread, when its engine call begins."""

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
