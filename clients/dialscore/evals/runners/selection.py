"""Which records of a data file a runner evaluates."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

__all__ = ["first"]

T = TypeVar("T")


def first(records: Sequence[T], limit: int | None, nothing: str) -> list[T]:
    """The first `limit` records (all of them when `limit` is None), in order. Raises
    ValueError(`nothing`) when that leaves none to evaluate."""
    kept = list(records) if limit is None else list(records[:limit])
    if not kept:
        raise ValueError(nothing)
    return kept
