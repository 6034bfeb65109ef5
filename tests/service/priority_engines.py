"""A fake NLL engine whose every NLL says the CPU priority of the thread that computed it, so an
answer says whether a bulk pool's engine served it (importable by replicas: the service tests
put this folder on PYTHONPATH)."""

from __future__ import annotations

import os
import threading
import time
from typing import Any

from fake_api import FakeNLLEngine


def thread_priority(model: str, item: dict[str, Any]) -> float:
    """A fake NLL: ``100 * policy + nice`` of the calling thread (Linux's scheduling policy
    number, ``os.SCHED_OTHER`` 0 or ``os.SCHED_IDLE`` 5, and its nice value)."""
    tid = threading.get_native_id()
    return float(100 * os.sched_getscheduler(tid) + os.getpriority(os.PRIO_PROCESS, tid))


def decode(nll: float) -> tuple[int, int]:
    """(policy, nice) from :func:`thread_priority`'s NLL."""
    policy, nice = divmod(round(nll), 100)
    return policy, nice


class PriorityNLLEngine(FakeNLLEngine):
    """:class:`FakeNLLEngine` scoring :func:`thread_priority`."""

    def __init__(self, card: Any, scorer: Any = thread_priority):
        super().__init__(card, scorer)


#: A hang guard for :func:`held_or_priority`'s wait, not a speed requirement.
HOLD_GUARD_S = 120.0


def held_or_priority(model: str, item: dict[str, Any]) -> float:
    """:func:`thread_priority`, except for an item whose knowledge is ``hold:<folder>``: its
    engine call first creates ``<folder>/inside``, then waits while ``<folder>/hold`` exists (so
    a test holds an engine call at work for as long as it likes), then removes ``inside``."""
    knowledge = str(item.get("knowledge") or "")
    if knowledge.startswith("hold:"):
        folder = knowledge.removeprefix("hold:")
        open(os.path.join(folder, "inside"), "w").close()
        deadline = time.monotonic() + HOLD_GUARD_S
        while os.path.exists(os.path.join(folder, "hold")) and time.monotonic() < deadline:
            time.sleep(0.01)
        os.remove(os.path.join(folder, "inside"))
    return thread_priority(model, item)


class HoldingNLLEngine(FakeNLLEngine):
    """:class:`FakeNLLEngine` scoring :func:`held_or_priority`."""

    def __init__(self, card: Any, scorer: Any = held_or_priority):
        super().__init__(card, scorer)
