"""Sending a list in requests the service accepts: caps from its published limits, halving on a 413.

A list request (NLL ``items``, contradiction ``dialogues``, rerank ``candidates``) is sent in
chunks of at most the deployment's published limit (:func:`cap`). When the limit is unknown (a
deployment that publishes none) or smaller than the client thought, the service answers 413
``payload_too_large``; if the 413 is about the request as a whole (:func:`splittable`), the
chunk is halved and each half sent again (:func:`send_halving`), down to single elements. An
error about one element names it in the chunk (``items[3].target``); :func:`shift_param`
re-roots it so that it names the element in the caller's whole list.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any, TypeVar

from dialscore.errors import APIStatusError, PayloadTooLargeError

__all__ = ["cap", "chunked", "gather_all", "send_halving", "shift_param", "splittable"]

log = logging.getLogger("dialscore.client")

T = TypeVar("T")
R = TypeVar("R")


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


async def send_halving(send: Callable[[list[T]], Awaitable[list[R]]], chunk: list[T],
                       field: str) -> list[R]:
    """``await send(chunk)``, one result per element in order; on a :func:`splittable` 413,
    the two halves in turn (recursively). Other errors propagate, their param re-rooted to
    name the element in `chunk`."""
    try:
        return await send(chunk)
    except PayloadTooLargeError as exc:
        if not splittable(exc, len(chunk), field):
            raise
    mid = len(chunk) // 2
    log.warning("%d %s refused as too large; splitting in two", len(chunk), field)
    left = await send_halving(send, chunk[:mid], field)
    try:
        return left + await send_halving(send, chunk[mid:], field)
    except APIStatusError as inner:
        shift_param(inner, mid, field)
        raise


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
