"""Points inside an engine call where the call shows it progresses, and where a yielding engine
steps aside for interactive work.

A bulk pool that yields (``yield_to_interactive_s``) waits before each engine call while an
interactive request is on its device (:mod:`.device_gate`). A call already running would compute
on beside an interactive request that arrives meanwhile: on shared cores it takes their time,
caches and memory bandwidth, on a GPU the interactive kernels queue behind its own. Pause points
let it step aside mid-call instead:

* **between forward passes**: :meth:`~.cancellation.CallGuard.forward` calls :func:`pause_point`
  before each pass it times;
* **between the layers of a pass**: :func:`install` registers a forward pre-hook (PyTorch's
  public ``register_forward_pre_hook``) on every layer of a model (every module held by an
  ``nn.ModuleList``: a transformer's blocks, an encoder's and a decoder's layers), which calls
  :func:`pause_point`. A pass replayed from a CUDA graph runs no hooks: it pauses between passes
  only.

:func:`pause_point` does nothing outside a :func:`pausing` block, so an engine whose calls do not
yield (every interactive replica, a batch worker) pays one thread-local lookup per layer. Inside
one, on the thread that entered it, it calls the block's `pause` (a yielding serving's: wait while
the gate is held, within the call's budget) and adds the seconds waited to the block's
:class:`Paused`, which the pass's timer subtracts, so time paused is not engine time.

A paused call keeps its memory (activations, key/value states) while it waits.

**Progress.** Every pause point also marks progress, whether or not its thread pauses: on a
thread that called :func:`report_progress` (the replica's engine thread,
:class:`~.engine_thread.EngineThread`), it calls that thread's callback on arrival and again after
a pause, so the health check's stall bound (``engine_stall_s``) times the longest stretch without
a pass or layer begun, not the whole call.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

__all__ = ["Paused", "install", "now_less_pauses", "pause_point", "paused_seconds", "pausing",
           "report_progress"]

_local = threading.local()


@dataclass
class Paused:
    """What one :func:`pausing` block waited: the pause points that waited, and their seconds."""

    points: int = 0
    seconds: float = 0.0


@contextmanager
def pausing(pause: Callable[[], float], paused: Paused | None = None) -> Iterator[Paused]:
    """For the block, on this thread, every :func:`pause_point` calls `pause` (which returns the
    seconds it waited) and adds what it waited to `paused` (default: a new :class:`Paused`),
    which the block yields. Blocks do not nest."""
    if getattr(_local, "pause", None) is not None:
        raise RuntimeError("pausing blocks do not nest")
    paused = paused if paused is not None else Paused()
    _local.pause, _local.paused = pause, paused
    try:
        yield paused
    finally:
        _local.pause = _local.paused = None


def report_progress(progressed: Callable[[], None] | None) -> None:
    """From now on, every :func:`pause_point` this thread reaches calls `progressed` (None:
    stop), on arrival and again after it pauses."""
    _local.progressed = progressed


def pause_point() -> None:
    """Mark progress, and step aside here if this thread is in a :func:`pausing` block (see the
    module docstring)."""
    progressed = getattr(_local, "progressed", None)
    if progressed is not None:
        progressed()
    pause = getattr(_local, "pause", None)
    if pause is None:
        return
    waited = pause()
    if waited > 0:
        paused: Paused = _local.paused
        paused.points += 1
        paused.seconds += waited
        if progressed is not None:
            progressed()


def paused_seconds() -> float:
    """Seconds this thread's :func:`pausing` block has waited so far (0.0 outside one)."""
    paused = getattr(_local, "paused", None)
    return 0.0 if paused is None else paused.seconds


def now_less_pauses(paused_then: float) -> float:
    """``time.perf_counter()`` now, less the seconds this thread paused since it read
    `paused_then` from :func:`paused_seconds`: the end of a span that was started then, with its
    pauses left out."""
    return time.perf_counter() - (paused_seconds() - paused_then)


def _before_layer(_module: Any, _args: Any) -> None:
    pause_point()


def install(model: Any) -> int:
    """Register a :func:`pause_point` before every layer of `model` (each module held by an
    ``nn.ModuleList`` within it); returns how many."""
    import torch

    layers = [layer for module in model.modules() if isinstance(module, torch.nn.ModuleList)
              for layer in module]
    for layer in layers:
        layer.register_forward_pre_hook(_before_layer)
    return len(layers)
