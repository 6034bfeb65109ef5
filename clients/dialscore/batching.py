"""Sending a list in requests the service accepts: caps from its published limits, halving on a 413.

``nll_many``'s items are planned into chunks by count and by JSON size (:func:`plan_chunks`),
within the published limits (:func:`chunk_bounds`); other lists by count (:func:`chunked`).

A list request (NLL ``items``, contradiction ``dialogues``, rerank ``candidates``) is sent in
chunks of at most the deployment's published limit (:func:`cap`). When the limit is unknown (a
deployment that publishes none) or smaller than the client thought, the service answers 413
``payload_too_large``; if the 413 is about the request as a whole (:func:`splittable`), the
chunk is halved and each half sent again, down to single elements. An error about one element
names it in the part sent (``items[3].target``); :func:`shift_param` re-roots it so that it
names the element in the caller's whole list.

The halving is one algorithm for the sync and the async client, written without I/O in the
manner of httpx's protocol/transport split: :func:`halving` is a generator that yields the part
to send next and is sent that part's results, or is thrown the
:class:`~dialscore.errors.APIStatusError` the part got. :func:`send_halving` drives it with a
blocking ``send``, :func:`asend_halving` with a coroutine; the drivers do nothing but call
``send``. Likewise the chunks of one list land in one :class:`ChunkResults`, whether they ran on
threads (:func:`run_chunks`) or as tasks (:func:`arun_chunks`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import Awaitable, Callable, Generator, Iterable, Sequence
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from typing import Any, Generic, TypeVar

from dialscore.errors import APIStatusError, PayloadTooLargeError
from dialscore.types import PublishedLimits

__all__ = ["BODY_ENVELOPE_BYTES", "ChunkResults", "arun_chunks", "asend_halving", "cap",
           "chunk_bounds", "chunked", "gather_all", "halving", "plan_chunks", "run_chunks",
           "send_halving", "shift_param", "splittable"]

log = logging.getLogger("dialscore.client")

T = TypeVar("T")
R = TypeVar("R")

#: What :func:`halving` yields (the part to send), is sent (its results) and returns (all results).
Halving = Generator[list[T], list[R], list[R]]


def cap(requested: int, limit: int | None) -> int:
    """`requested`, lowered to `limit` when the deployment publishes one."""
    return requested if limit is None else min(requested, limit)


def _element(field: str) -> re.Pattern[str]:
    return re.compile(rf"^{re.escape(field)}\[(\d+)\]")


def splittable(exc: PayloadTooLargeError, n: int, field: str) -> bool:
    """Whether halving a request of `n` elements of the list `field` can help: the 413 is about
    the request as a whole (its param is the list itself, ``body`` for the byte limit, or
    absent, as from a proxy), not about one element (``field[i]...``) or another field (the
    rerank ``context``), and there is more than one element."""
    return n > 1 and exc.param in (None, field, "body")


def shift_param(exc: APIStatusError, offset: int, field: str) -> None:
    """Make ``field[i]...`` in the error of a chunk starting at `offset` name element
    ``offset + i`` of the whole list, in place."""
    if exc.param and offset:
        exc.param = _element(field).sub(lambda m: f"{field}[{int(m.group(1)) + offset}]",
                                        exc.param)


def _halves(chunk: list[T], field: str) -> Halving[T, R]:
    try:
        return (yield chunk)
    except PayloadTooLargeError as exc:
        if not splittable(exc, len(chunk), field):
            raise
    mid = len(chunk) // 2
    log.warning("%d %s refused as too large; splitting in two", len(chunk), field)
    left = yield from _halves(chunk[:mid], field)
    try:
        right = yield from _halves(chunk[mid:], field)
    except APIStatusError as inner:
        shift_param(inner, mid, field)
        raise
    return left + right


def halving(chunk: list[T], field: str, offset: int = 0) -> Halving[T, R]:
    """The sending of `chunk`, the elements ``offset...`` of the list `field`, without I/O.

    Yields the part to send next (first the whole chunk) and must be sent that part's results,
    one per element in order, or thrown the :class:`~dialscore.errors.APIStatusError` it got.
    After a :func:`splittable` 413 it yields the two halves in turn (recursively); it returns
    every result in element order. Any other error is raised back out of ``throw``, its param
    re-rooted to name the element in the whole list (``field[offset + i]...``).
    """
    try:
        return (yield from _halves(chunk, field))
    except APIStatusError as exc:
        shift_param(exc, offset, field)
        raise


def send_halving(send: Callable[[list[T]], list[R]], chunk: list[T], field: str,
                 offset: int = 0) -> list[R]:
    """:func:`halving` driven by a blocking ``send(part) -> results``."""
    plan: Halving[T, R] = halving(chunk, field, offset)
    part = next(plan)
    try:
        while True:
            try:
                results = send(part)
            except APIStatusError as exc:
                part = plan.throw(exc)
            else:
                part = plan.send(results)
    except StopIteration as done:
        return done.value


async def asend_halving(send: Callable[[list[T]], Awaitable[list[R]]], chunk: list[T],
                        field: str, offset: int = 0) -> list[R]:
    """:func:`halving` driven by a coroutine ``send(part) -> results``."""
    plan: Halving[T, R] = halving(chunk, field, offset)
    part = next(plan)
    try:
        while True:
            try:
                results = await send(part)
            except APIStatusError as exc:
                part = plan.throw(exc)
            else:
                part = plan.send(results)
    except StopIteration as done:
        return done.value


class ChunkResults(Generic[R]):
    """The results of a list of `n` elements sent in chunks, put in place as each chunk lands;
    `on_chunk(offset, results)` is told of every chunk in landing order, in the caller's
    thread (e.g. to save progress)."""

    def __init__(self, n: int, on_chunk: Callable[[int, list[R]], None] | None = None):
        self._results: list[R | None] = [None] * n
        self._landed = 0
        self._on_chunk = on_chunk

    def land(self, offset: int, results: list[R]) -> None:
        """The results of the chunk whose first element is element `offset` of the list."""
        self._results[offset:offset + len(results)] = results
        self._landed += len(results)
        if self._on_chunk is not None:
            self._on_chunk(offset, results)

    def results(self) -> list[R]:
        """Every element's result in list order; ValueError while some have not landed."""
        if self._landed != len(self._results):
            raise ValueError(f"{len(self._results) - self._landed} of {len(self._results)} "
                             "results have not landed")
        return self._results  # type: ignore[return-value]


def run_chunks(run: Callable[[int, list[T]], list[R]], chunks: Sequence[tuple[int, list[T]]],
               workers: int, land: Callable[[int, list[R]], None]) -> None:
    """``run(offset, chunk)`` for every chunk, on at most `workers` threads (in the calling
    thread when there is one chunk or one worker), started in order; ``land(offset, results)``
    runs in the calling thread as each finishes. On the first error the chunks not started are cancelled, the
    running ones awaited, and the error raised."""
    if len(chunks) <= 1 or workers <= 1:
        for offset, chunk in chunks:
            land(offset, run(offset, chunk))
        return

    def one(offset: int, chunk: list[T]) -> tuple[int, list[R]]:
        return offset, run(offset, chunk)

    pool = ThreadPoolExecutor(max_workers=min(workers, len(chunks)), thread_name_prefix="dialscore")
    try:
        pending = {pool.submit(one, offset, chunk) for offset, chunk in chunks}
        while pending:
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            for future in done:
                land(*future.result())
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


async def arun_chunks(run: Callable[[int, list[T]], Awaitable[list[R]]],
                      chunks: Sequence[tuple[int, list[T]]], workers: int,
                      land: Callable[[int, list[R]], None]) -> None:
    """``await run(offset, chunk)`` for every chunk, at most `workers` chunks in progress at
    once and started in order, as :func:`run_chunks` does on threads; ``land(offset, results)``
    as each finishes. On the first error the other chunks are cancelled and the error raised."""
    todo = iter(chunks)

    async def worker() -> None:
        for offset, chunk in todo:  # one iterator shared by the workers: each chunk taken once
            land(offset, await run(offset, chunk))

    tasks = [asyncio.ensure_future(worker()) for _ in range(min(max(workers, 1), len(chunks)))]
    try:
        await asyncio.gather(*tasks)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def gather_all(coros: Iterable[Awaitable[Any]]) -> list[Any]:
    """Run coroutines concurrently (the client's semaphore bounds the requests in flight) and
    return their results in order; on the first error cancel the rest and raise it."""
    tasks = [asyncio.ensure_future(c) for c in coros]
    try:
        return await asyncio.gather(*tasks)
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def chunked(seq: Sequence[T], size: int) -> list[tuple[int, list[T]]]:
    """``(offset, chunk)`` runs of at most `size` elements of `seq`, in order."""
    if size < 1:
        raise ValueError("a chunk holds at least one element")
    return [(i, list(seq[i:i + size])) for i in range(0, len(seq), size)]


#: Bytes of a POST /v1/nll body besides its items (model name, keys, brackets), kept free under
#: the published max_body_bytes when chunks are planned by their items' JSON size.
BODY_ENVELOPE_BYTES = 4096


def chunk_bounds(limits: PublishedLimits | None, chunk_size: int, max_chunk_bytes: int | None
                 ) -> tuple[int, int | None]:
    """`chunk_size` and `max_chunk_bytes` capped at the deployment's published `limits` (items
    at ``max_items``; bytes at ``max_body_bytes`` less :data:`BODY_ENVELOPE_BYTES`); unchanged
    when it publishes none."""
    if limits is None:
        return chunk_size, max_chunk_bytes
    if limits.max_body_bytes is not None:
        room = max(1, limits.max_body_bytes - BODY_ENVELOPE_BYTES)
        max_chunk_bytes = cap(max_chunk_bytes, room) if max_chunk_bytes else room
    return cap(chunk_size, limits.max_items), max_chunk_bytes


def plan_chunks(items: Sequence[dict[str, Any]], chunk_size: int,
                max_chunk_bytes: int | None = None) -> list[tuple[int, list[dict[str, Any]]]]:
    """Split items into ``(offset, chunk)`` runs of at most ``chunk_size`` items and (roughly, by
    their JSON size) ``max_chunk_bytes``; an item bigger than the byte bound travels alone."""
    if chunk_size < 1:
        raise ValueError("chunk_size must be at least 1")
    chunks: list[tuple[int, list[dict[str, Any]]]] = []
    current: list[dict[str, Any]] = []
    start, size = 0, 0
    for i, item in enumerate(items):
        n = len(json.dumps(item, ensure_ascii=False).encode()) + 1 if max_chunk_bytes else 0
        if current and (len(current) >= chunk_size or (max_chunk_bytes and size + n > max_chunk_bytes)):
            chunks.append((start, current))
            current, start, size = [], i, 0
        current.append(item)
        size += n
    if current:
        chunks.append((start, current))
    return chunks
