"""Captured CUDA graphs of a decoder-only model's trunk for small plain passes.

A small pass on a GPU is bound by launching its kernels one by one from Python (a one-item pass
of a 24-layer model launches several hundred), not by the arithmetic. :class:`GraphedTrunk`
captures the trunk (``model.base_model``: embeddings, blocks, final norm, and, when the engine
keeps contexts in its context cache, every layer's keys and values) once per padded shape and
replays the graph instead, which launches the whole pass at once.

Shapes are (rows, width) buckets, powers of two from :data:`MIN_WIDTH` positions wide, with at
most ``positions`` = rows x width positions (:func:`buckets`). A pass is padded up to the
smallest bucket that holds it, in area: rows of the pad token, and pad tokens after each row.
Right padding under causal attention leaves every real position's hidden state as it is (a real
position attends only to earlier positions, all real), so the numbers differ from an unpadded
pass only by float rounding (other kernel shapes). A pass no bucket holds runs as before, and so
does every pass that starts from cached keys and values (its inputs are not ids alone).

All graphs share one memory pool and are replayed one at a time, by one thread at a time (the
engine's), each output read before the next replay: a replay overwrites its graph's outputs (the
context cache stores copies of the keys and values it keeps).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

#: The narrowest bucket, in positions.
MIN_WIDTH = 16
#: Uncaptured warm-up passes per shape before its capture (lazy initialisation, autotuning).
WARMUP_PASSES = 2


def buckets(positions: int, max_width: int) -> list[tuple[int, int]]:
    """Every (rows, width) with rows and width powers of two, ``MIN_WIDTH <= width <=
    max_width`` and ``rows * width <= positions``; widest first, then most rows first. Empty when
    `positions` is below :data:`MIN_WIDTH` or `max_width` below it."""
    shapes = []
    width = MIN_WIDTH
    while width <= max_width and width <= positions:
        rows = 1
        while rows * 2 * width <= positions:
            rows *= 2
        while rows >= 1:
            shapes.append((rows, width))
            rows //= 2
        width *= 2
    return sorted(shapes, key=lambda s: (-s[1], -s[0]))


def bucket_for(rows: int, width: int, shapes: list[tuple[int, int]]) -> tuple[int, int] | None:
    """The smallest shape (fewest positions, then fewest rows) of `shapes` holding `rows` rows of
    `width` positions, or None when none does."""
    fits = [s for s in shapes if s[0] >= rows and s[1] >= width]
    return min(fits, key=lambda s: (s[0] * s[1], s[0])) if fits else None


class GraphedTrunk:
    """A model trunk's passes through captured graphs, one per bucket.

    Args:
        trunk: (ids (rows x width, long, on `device`), `keep_states`) -> the pass's outputs:
            hidden states (rows x width x hidden), and whatever else the caller reads (tensors,
            in any nesting of tuples and lists), such as every layer's keys and values when
            `keep_states` (:meth:`~dialscore_server.nll.engine.forward.ForwardPasses.trunk`).
            Called with shapes of `shapes` only, under the caller's inference mode.
        device: a CUDA device.
        pad_id: the token written in padding slots.
        shapes: the buckets to capture (:func:`buckets`).
        keep_states: passed to `trunk` at capture, and kept as :attr:`keep_states`: a pass that
            must keep (or must not keep) its keys and values replays only graphs that do the same.

    Capturing runs each shape's pass ``WARMUP_PASSES + 1`` times. A shape whose capture fails
    (an operation a graph cannot hold, such as a host sync) is left out, and its error kept in
    :attr:`failed`, so passes of that shape run eagerly.
    """

    def __init__(self, trunk: Callable[[Any, bool], Any], device: str, pad_id: int,
                 shapes: list[tuple[int, int]], *, keep_states: bool):
        import torch

        self.keep_states = keep_states
        self.pad_id = pad_id
        self.device = device
        self.failed: dict[tuple[int, int], str] = {}
        self._graphs: dict[tuple[int, int], tuple[Any, Any, Any]] = {}
        pool = torch.cuda.graph_pool_handle()
        side = torch.cuda.Stream(device=device)
        side.wait_stream(torch.cuda.current_stream(device))
        for shape in shapes:  # widest first: later captures fit in the pool's freed blocks
            ids = torch.full(shape, pad_id, dtype=torch.long, device=device)
            try:
                with torch.cuda.stream(side):
                    for _ in range(WARMUP_PASSES):
                        trunk(ids, keep_states)
                torch.cuda.current_stream(device).wait_stream(side)
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph, pool=pool):
                    out = trunk(ids, keep_states)
            except RuntimeError as e:  # not capturable: this shape runs eagerly
                self.failed[shape] = str(e).splitlines()[0]
                torch.cuda.synchronize(device)
                continue
            self._graphs[shape] = (graph, ids, out)
        self._shapes = list(self._graphs)

    @property
    def shapes(self) -> list[tuple[int, int]]:
        """The captured buckets."""
        return list(self._shapes)

    def bucket(self, rows: int, width: int) -> tuple[int, int] | None:
        """The captured bucket a pass of `rows` x `width` replays, or None (eager)."""
        return bucket_for(rows, width, self._shapes)

    def __call__(self, ids: Any) -> tuple[tuple[int, int], Any] | None:
        """(the bucket replayed, the trunk's outputs) for `ids` (rows x width, long, any device)
        from the smallest captured bucket holding them. The outputs are shaped as the bucket
        (rows x width lead every tensor that has them: the pass's are the first ones) and valid
        until the next call. None when no bucket holds them."""
        shape = self.bucket(*ids.shape)
        if shape is None:
            return None
        import torch

        graph, static_ids, out = self._graphs[shape]
        with torch.cuda.device(self.device):
            static_ids.fill_(self.pad_id)
            static_ids[: ids.shape[0], : ids.shape[1]].copy_(ids)
            graph.replay()
        return shape, out
