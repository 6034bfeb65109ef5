"""Priority lanes on one replica (dialscore_server.scheduling.lanes), by construction: chunks wait
in a LaneQueue whose engine calls end when the test says (:class:`DrivenEngine`), so what each
call takes depends only on what waited when the previous one ended, never on the machine's speed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

import pytest
from pydantic import ValidationError

from dialscore_server.contract.options import ServingOptions
from dialscore_server.contradiction.engine.pairing import DetectionJob, Turn
from dialscore_server.contradiction.serving import ContradictionServing
from dialscore_server.scheduling.chunks import Chunk, Outcome
from dialscore_server.scheduling.lanes import LanePolicy, LaneQueue
from dialscore_server.scheduling.serving import lane_policy
from merging_runner import until
from test_fair_chunks import GatedDetector, dialogue


@dataclass(kw_only=True)
class Piece(Chunk):
    """A chunk named for the test, costing `units`."""

    name: str
    units: int = 1

    @property
    def cost(self) -> int:
        return self.units


class DrivenEngine:
    """An engine call that records the names of its chunks and returns only when the test calls
    :meth:`release`; each chunk's value is its name."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []
        self._held: list[asyncio.Future[None]] = []

    async def __call__(self, chunks: Sequence[Piece]) -> list[Outcome[str]]:
        held = asyncio.get_running_loop().create_future()
        self.calls.append([c.name for c in chunks])
        self._held.append(held)
        await held
        return [Outcome(c.name, 0.0) for c in chunks]

    def end_call(self) -> None:
        """End the running call (its answers reach its waiters as the event loop runs)."""
        self._held.pop(0).set_result(None)

    async def release(self) -> None:
        """End the running call and wait until the next one began or nothing waits."""
        n = len(self.calls)
        self.end_call()
        await until(lambda: len(self.calls) > n or not self._queue.waiting(),
                    "the next engine call")

    def attach(self, queue: LaneQueue) -> LaneQueue:
        self._queue = queue
        return queue


def send(queue: LaneQueue, name: str, lane: str = "interactive", units: int = 1
         ) -> asyncio.Future[Outcome[str]]:
    return asyncio.ensure_future(queue(Piece(name=name, units=units, lane=lane)))


async def running(engine: DrivenEngine, queue: LaneQueue, first: str, waiting: int) -> None:
    """Until `first` holds the engine and `waiting` chunks wait behind it."""
    await until(lambda: engine.calls and engine.calls[0] == [first], "the first engine call")
    await until(lambda: len(queue.waiting()) == waiting, f"{waiting} chunks waiting")


def test_an_interactive_chunk_is_served_before_bulk_chunks_queued_earlier():
    async def go():
        engine = DrivenEngine()
        queue = engine.attach(LaneQueue(engine))
        sent = [send(queue, "b0", "bulk")]
        await until(lambda: engine.calls, "the first call")
        sent += [send(queue, "b1", "bulk"), send(queue, "b2", "bulk"), send(queue, "i")]
        await running(engine, queue, "b0", waiting=3)
        for _ in range(4):
            await engine.release()
        assert [o.value for o in await asyncio.gather(*sent)] == ["b0", "b1", "b2", "i"]
        return engine.calls

    assert asyncio.run(go()) == [["b0"], ["i"], ["b1"], ["b2"]]


def test_a_merged_call_takes_only_interactive_chunks_while_they_wait():
    async def go():
        engine = DrivenEngine()
        queue = engine.attach(LaneQueue(engine, max_batch_size=100))
        sent = [send(queue, "b0", "bulk", 10)]
        await until(lambda: engine.calls, "the first call")
        sent += [send(queue, f"b{k}", "bulk", 10) for k in (1, 2, 3)]
        sent += [send(queue, "i1", units=5), send(queue, "i2", units=5)]
        await running(engine, queue, "b0", waiting=5)
        await engine.release()
        await engine.release()
        await engine.release()
        await asyncio.gather(*sent)
        return engine.calls, queue.counts

    calls, counts = asyncio.run(go())
    assert calls == [["b0"], ["i1", "i2"], ["b1", "b2", "b3"]]
    assert counts.work == {"interactive": 10, "bulk": 40}


ONE_AT_A_TIME = [["i0"], ["i1"], ["i2"], ["b0"], ["i3"], ["i4"], ["b1"], ["i5"], ["i6"], ["b2"]]
MERGED = [["i0"], ["i1"], ["i2"], ["b0", "i3"], ["i4"], ["i5"], ["b1", "i6"], ["i7"], ["i8"],
          ["b2", "i9"]]


@pytest.mark.parametrize("max_batch_size,want", [(None, ONE_AT_A_TIME), (10, MERGED)])
def test_bulk_gets_one_call_in_every_bulk_every_while_interactive_work_keeps_waiting(
        max_batch_size, want):
    """An interactive chunk is queued before each call ends (so interactive work always waits);
    bulk still has its oldest chunk in every third call (merged: first, then interactive ones
    fill the call), and no more."""
    async def go():
        engine = DrivenEngine()
        queue = engine.attach(LaneQueue(engine, max_batch_size=max_batch_size,
                                        policy=LanePolicy(bulk_every=3)))
        sent = [send(queue, "i0")]
        await until(lambda: engine.calls, "the first call")
        sent += [send(queue, f"b{k}", "bulk") for k in range(3)]
        for k in range(1, 10):
            sent.append(send(queue, f"i{k}"))
            await until(lambda: len(queue.waiting("interactive")) >= 1, "interactive waiting")
            await engine.release()
        return engine.calls

    assert asyncio.run(go())[:10] == want


def test_bulk_has_every_call_when_no_interactive_chunk_waits():
    async def go():
        engine = DrivenEngine()
        queue = engine.attach(LaneQueue(engine, max_batch_size=20))
        sent = [send(queue, "b0", "bulk", 10)]
        await until(lambda: engine.calls, "the first call")
        sent += [send(queue, f"b{k}", "bulk", 10) for k in (1, 2, 3)]
        await running(engine, queue, "b0", waiting=3)
        for _ in range(3):
            await engine.release()
        await asyncio.gather(*sent)
        return engine.calls

    assert asyncio.run(go()) == [["b0"], ["b1", "b2"], ["b3"]]


def test_bulk_calls_merge_no_more_than_bulk_max_batch():
    async def go():
        engine = DrivenEngine()
        queue = engine.attach(LaneQueue(engine, max_batch_size=100,
                                        policy=LanePolicy(bulk_max_batch=20)))
        sent = [send(queue, "b0", "bulk", 10)]
        await until(lambda: engine.calls, "the first call")
        sent += [send(queue, f"b{k}", "bulk", 10) for k in (1, 2, 3)]
        sent += [send(queue, "i1", units=10), send(queue, "i2", units=10),
                 send(queue, "i3", units=10)]
        await running(engine, queue, "b0", waiting=6)
        for _ in range(4):
            await engine.release()
        await asyncio.gather(*sent)
        return engine.calls

    # interactive calls keep the whole budget; bulk calls stop at 20
    assert asyncio.run(go()) == [["b0"], ["i1", "i2", "i3"], ["b1", "b2"], ["b3"]]


class FakeClock:
    """A clock that moves only when the test sets :attr:`now`."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize("hold,want", [
    (2.0, [["b0"], ["b1", "b2", "b3"], ["i0"], ["b4", "b5"], ["b6", "b7", "b8"]]),
    (None, [["b0"], ["b1", "b2"], ["b3"], ["i0"], ["b4", "b5"], ["b6", "b7"], ["b8"]])])
def test_bulk_max_batch_holds_only_within_its_hold_after_an_interactive_arrival(hold, want):
    """With a 2 s hold, bulk calls merge the whole budget (100) before any interactive chunk
    arrived and again 2 s after the last one (b6-b8), and stop at bulk_max_batch (20) within the
    hold (b4, b5); with no hold, always at 20. The queue's clock moves only when the test says."""
    async def go():
        clock = FakeClock()
        engine = DrivenEngine()
        queue = engine.attach(LaneQueue(engine, max_batch_size=100, clock=clock, policy=LanePolicy(
            bulk_max_batch=20, bulk_max_batch_hold_s=hold)))
        sent = [send(queue, "b0", "bulk", 10)]
        await until(lambda: engine.calls, "the first call")
        sent += [send(queue, f"b{k}", "bulk", 10) for k in (1, 2, 3)]
        await running(engine, queue, "b0", waiting=3)
        while len(queue.waiting()) > 0:
            await engine.release()  # b1-b3: no interactive chunk yet
        clock.now = 10.0
        sent += [send(queue, "i0")] + [send(queue, f"b{k}", "bulk", 10) for k in (4, 5, 6, 7, 8)]
        await until(lambda: len(queue.waiting()) == 6, "i0 and b4-b8 waiting")
        await engine.release()  # i0
        clock.now = 11.0  # within the hold
        await engine.release()  # b4, b5
        clock.now = 12.5  # the hold of i0 (10.0 + 2.0) has lapsed
        while len(queue.waiting()) > 0:
            await engine.release()
        engine.end_call()
        await asyncio.gather(*sent)
        return engine.calls

    assert asyncio.run(go()) == want


#: A batch wait no test outlives: a call that waits for it never starts within the test.
FOREVER_S = 10 ** 6


def test_a_bulk_call_full_at_bulk_max_batch_starts_without_waiting_to_fill_the_budget():
    """A call of bulk chunks alone is full at bulk_max_batch: it starts at once, not after the
    batch wait (never, here). A call that is not full waits: the last bulk chunk alone, until
    another arrives; an interactive call, whose budget is the whole max_batch_size, until
    interactive chunks fill it."""
    async def go():
        engine = DrivenEngine()
        queue = engine.attach(LaneQueue(engine, max_batch_size=100, batch_wait_timeout_s=FOREVER_S,
                                        policy=LanePolicy(bulk_max_batch=20)))
        sent = {f"b{k}": send(queue, f"b{k}", "bulk", 10) for k in range(3)}
        await until(lambda: engine.calls, "the first call (b0 and b1 fill the bulk budget)")
        sent["i0"] = send(queue, "i0", units=10)
        engine.end_call()
        await until(lambda: sent["b1"].done(), "the first call's answers")
        await until(lambda: len(queue.waiting()) == 2, "b2 and i0 waiting")
        assert len(engine.calls) == 1  # i0 (10 of 100) waits to fill its call, b2 behind it
        sent |= {f"i{k}": send(queue, f"i{k}", units=50) for k in (1, 2)}  # i2 does not fit
        await until(lambda: len(engine.calls) == 2, "the first interactive call")
        sent["b3"] = send(queue, "b3", "bulk", 10)
        engine.end_call()
        await until(lambda: sent["i1"].done(), "the first interactive call's answers")
        await until(lambda: len(queue.waiting()) == 3, "i2, b2 and b3 waiting")
        assert len(engine.calls) == 2  # i2 (50 of 100) waits
        sent["i3"] = send(queue, "i3", units=50)
        await until(lambda: len(engine.calls) == 3, "the second interactive call")
        await engine.release()  # b2 + b3 fill the bulk budget: their call starts at once
        await engine.release()
        await asyncio.gather(*sent.values())
        return engine.calls

    assert asyncio.run(go()) == [["b0", "b1"], ["i0", "i1"], ["i2", "i3"], ["b2", "b3"]]


def test_with_lanes_off_every_chunk_waits_its_turn_first_come_first_served():
    async def go():
        engine = DrivenEngine()
        queue = engine.attach(LaneQueue(engine, policy=LanePolicy(enabled=False)))
        sent = [send(queue, "b0", "bulk")]
        await until(lambda: engine.calls, "the first call")
        sent += [send(queue, "b1", "bulk"), send(queue, "i")]
        await running(engine, queue, "b0", waiting=2)
        for _ in range(3):
            await engine.release()
        await asyncio.gather(*sent)
        return engine.calls

    assert asyncio.run(go()) == [["b0"], ["b1"], ["i"]]


def test_a_chunk_whose_request_left_is_never_computed():
    async def go():
        engine = DrivenEngine()
        queue = engine.attach(LaneQueue(engine))
        first = send(queue, "b0", "bulk")
        await until(lambda: engine.calls, "the first call")
        gone, stays = send(queue, "i"), send(queue, "b1", "bulk")
        await running(engine, queue, "b0", waiting=2)
        gone.cancel()
        await until(lambda: len(queue.waiting()) == 1, "the cancelled chunk out of the queue")
        await engine.release()
        await engine.release()
        await asyncio.gather(first, stays)
        return engine.calls

    assert asyncio.run(go()) == [["b0"], ["b1"]]


@pytest.mark.parametrize("asked,cost,lane", [
    ("interactive", 64, "interactive"), ("interactive", 65, "bulk"), ("bulk", 1, "bulk")])
def test_the_interactive_lane_admits_requests_up_to_its_cost_cap_and_bulk_is_always_honoured(
        asked, cost, lane):
    assert LanePolicy(interactive_max_cost=64).lane_of(asked, cost) == lane


def test_a_policy_refuses_settings_that_would_starve_or_mean_nothing():
    with pytest.raises(ValueError, match="bulk_every"):
        LanePolicy(bulk_every=0)
    with pytest.raises(ValueError, match="interactive_max_cost"):
        LanePolicy(interactive_max_cost=-1)
    with pytest.raises(ValueError, match="bulk_max_batch"):
        LanePolicy(bulk_max_batch=0)
    with pytest.raises(ValueError, match="bulk_max_batch_hold_s"):
        LanePolicy(bulk_max_batch=1, bulk_max_batch_hold_s=-1.0)


def test_a_serving_puts_a_request_over_one_chunk_in_the_bulk_lane_whatever_it_asks():
    """The default cap is one chunk: a job of more pairs than `chunk_pairs` is served in bulk even
    when it asks for interactive; a small job asking for bulk gets bulk; the reply says which."""
    serving = ContradictionServing(GatedDetector(), max_batch_pairs=4096, chunk_pairs=10)

    async def go():
        big = await serving.detect(DetectionJob([dialogue(10), dialogue(1)]), "interactive")
        small = await serving.detect(DetectionJob([dialogue(3)]), "interactive")
        asked_bulk = await serving.detect(DetectionJob([dialogue(3)]), "bulk")
        return big.lane, small.lane, asked_bulk.lane

    assert asyncio.run(go()) == ("bulk", "interactive", "bulk")
    assert Turn  # the pairing's turns build the dialogues above


def test_the_operators_hold_reaches_the_lane_policy_and_a_negative_one_is_refused():
    """The replica's options carry bulk_max_batch_hold_s (default 2 s, null: always) into its
    lane policy; a negative hold is refused naming the field."""
    assert lane_policy(ServingOptions(bulk_max_batch=512), 2048).bulk_max_batch_hold_s == 2.0
    always = lane_policy(ServingOptions(bulk_max_batch=512, bulk_max_batch_hold_s=None), 2048)
    assert always.bulk_max_batch_hold_s is None and always.bulk_max_batch == 512
    with pytest.raises(ValidationError, match="bulk_max_batch_hold_s"):
        ServingOptions(bulk_max_batch_hold_s=-1.0)


def test_interactive_work_seen_elsewhere_holds_bulk_max_batch_as_an_arrival_would():
    """A queue of bulk chunks only (a bulk pool) merges its whole budget (100) until its
    `interactive_seen` reports interactive work (on its device, in another replica), then stops at
    bulk_max_batch (20) within the 2 s hold after it, and merges the whole budget again once
    the hold has lapsed. The clock and what is seen move only when the test says."""
    seen: list[float | None] = [None]

    async def go():
        clock = FakeClock()
        engine = DrivenEngine()
        queue = engine.attach(LaneQueue(
            engine, max_batch_size=100, clock=clock, interactive_seen=lambda: seen[0],
            policy=LanePolicy(bulk_max_batch=20, bulk_max_batch_hold_s=2.0)))
        sent = [send(queue, "b0", "bulk", 10)]
        await until(lambda: engine.calls, "the first call")
        sent += [send(queue, f"b{k}", "bulk", 10) for k in range(1, 9)]
        await running(engine, queue, "b0", waiting=8)
        await engine.release()  # nothing seen yet: b1-b8 in one call
        clock.now, seen[0] = 10.0, 9.5
        sent += [send(queue, f"b{k}", "bulk", 10) for k in range(9, 17)]
        await until(lambda: len(queue.waiting()) == 8, "b9-b16 waiting")
        await engine.release()  # interactive work seen 0.5 s ago: within 20
        clock.now = 11.4
        await engine.release()  # still within the hold (9.5 + 2.0)
        clock.now = 11.5
        while len(queue.waiting()) > 0:
            await engine.release()
        engine.end_call()
        await asyncio.gather(*sent)
        return engine.calls

    assert asyncio.run(go()) == [["b0"], [f"b{k}" for k in range(1, 9)], ["b9", "b10"],
                                 ["b11", "b12"], ["b13", "b14", "b15", "b16"]]
