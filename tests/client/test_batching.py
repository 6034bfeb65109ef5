"""The one halving algorithm (dialscore.batching.halving, no I/O) and its sync and async drivers:
which parts it asks for, in which order, and how it names an element in the caller's whole list."""

from __future__ import annotations

import asyncio

import pytest

from dialscore.batching import ChunkResults, asend_halving, halving, send_halving
from dialscore.errors import InvalidRequestError, PayloadTooLargeError


def too_large(param: str | None) -> PayloadTooLargeError:
    return PayloadTooLargeError("too large", param=param, type="payload_too_large")


def test_the_planner_asks_for_halves_and_returns_every_result_in_order():
    plan = halving(list(range(5)), "items")
    assert next(plan) == [0, 1, 2, 3, 4]
    assert plan.throw(too_large("items")) == [0, 1]              # the list as a whole: halve
    assert plan.send(["r0", "r1"]) == [2, 3, 4]
    assert plan.throw(too_large(None)) == [2]                    # no param (a proxy's 413): halve
    assert plan.send(["r2"]) == [3, 4]
    with pytest.raises(StopIteration) as done:
        plan.send(["r3", "r4"])
    assert done.value.value == ["r0", "r1", "r2", "r3", "r4"]


def test_an_element_error_names_the_element_in_the_whole_list():
    plan = halving(list(range(4)), "items", offset=10)
    next(plan)
    assert plan.throw(too_large("body")) == [0, 1]               # the byte limit: halve
    assert plan.send(["r0", "r1"]) == [2, 3]
    with pytest.raises(InvalidRequestError) as info:
        plan.throw(InvalidRequestError("empty", param="items[1].target"))
    assert info.value.param == "items[13].target"                # 10 + 2 + 1


def test_a_413_about_one_element_or_a_single_element_is_not_split():
    plan = halving(list(range(3)), "candidates", offset=4)
    next(plan)
    with pytest.raises(PayloadTooLargeError) as info:
        plan.throw(too_large("candidates[2]"))
    assert info.value.param == "candidates[6]"
    plan = halving(["only"], "items")
    next(plan)
    with pytest.raises(PayloadTooLargeError):
        plan.throw(too_large("items"))


def refusing_over(limit: int, sent: list[list[int]]):
    """A `send` that records each part and refuses more than `limit` elements with a 413."""
    def send(part: list[int]) -> list[str]:
        sent.append(part)
        if len(part) > limit:
            raise too_large("items")
        return [f"r{i}" for i in part]
    return send


def test_the_sync_and_async_drivers_send_the_same_parts():
    sync_sent: list[list[int]] = []
    sync = send_halving(refusing_over(2, sync_sent), list(range(7)), "items")
    async_sent: list[list[int]] = []
    blocking = refusing_over(2, async_sent)

    async def send(part: list[int]) -> list[str]:
        return blocking(part)

    got = asyncio.run(asend_halving(send, list(range(7)), "items"))
    assert sync == got == [f"r{i}" for i in range(7)]
    assert sync_sent == async_sent == [[0, 1, 2, 3, 4, 5, 6], [0, 1, 2], [0], [1, 2],
                                       [3, 4, 5, 6], [3, 4], [5, 6]]


def test_chunk_results_land_by_offset_and_refuse_a_partial_list():
    seen: list[int] = []
    landed = ChunkResults(5, lambda offset, results: seen.append(offset))
    landed.land(3, ["d", "e"])
    with pytest.raises(ValueError, match="3 of 5 results have not landed"):
        landed.results()
    landed.land(0, ["a", "b", "c"])
    assert landed.results() == ["a", "b", "c", "d", "e"] and seen == [3, 0]
