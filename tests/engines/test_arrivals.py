"""Requests admitted at the same time meet the engine together
(dialscore_server.scheduling.arrivals): a request that finishes admission waits for the ones
already being admitted, at most as long as its own admission took, so concurrent requests share
one engine call instead of the first running alone.

Admissions are held by gates the test opens, and "how long an admission took" comes from a clock
the test sets, so no outcome depends on how fast the machine is.
"""

from __future__ import annotations

import asyncio
import threading

import pytest

from dialscore.model_card import ModelCard
from dialscore_server.nll.engine.encoding import NLLItem
from dialscore_server.nll.serving import NLLServing
from dialscore_server.scheduling.arrivals import Arrivals
from fake_api import FakeNLLEngine
from merging_runner import MergingRunner, until

CARD = ModelCard(name="fake-gpt", family="causal", source="fake", revision=None, max_length=1024,
                 dtype="float32", device="cpu", stand_in=True)

#: What an admission "took" by the test's clock: far longer than anything the test waits for.
LONG_S = 3600.0


class Clock:
    """A clock each gated admission advances by its `took` seconds when it finishes."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Gate:
    """An admission held until the test opens it; it then advances `clock` by `took`."""

    def __init__(self, clock: Clock, took: float, value: object = None):
        self.clock, self.took, self.value = clock, took, value
        self.open = threading.Event()
        self.done = threading.Event()

    def __call__(self):
        assert self.open.wait(60), "the test never opened the gate"
        self.clock.now += self.took
        self.done.set()
        return self.value() if callable(self.value) else self.value


class GatedTokenizer(FakeNLLEngine):
    """The fake engine, whose `encode` waits at the gate of the item's context (tokenizing is
    CPU work off the event loop; the gate stands for it)."""

    def __init__(self, gates: dict[str, Gate]):
        super().__init__(CARD)
        self.gates = gates

    def encode(self, item):
        gate = self.gates[item.context[0].split()[0]]
        if not gate.done.is_set():
            gate()
        return super().encode(item)


def items(n: int, tag: str) -> list[NLLItem]:
    return [NLLItem(target="a b c", context=(f"{tag} {i}",)) for i in range(n)]


def test_concurrent_requests_share_the_first_engine_call():
    """A and B are admitted at the same time; A finishes first, while B is still being
    tokenized. A's chunk must not reach the engine's queue before B's admission ends (else A's
    chunk would run alone), and both then ride in one engine call."""
    clock = Clock()
    gates = {"a": Gate(clock, LONG_S), "b": Gate(clock, LONG_S)}
    runner = MergingRunner()
    serving = NLLServing(GatedTokenizer(gates), max_batch_tokens=8192, runner=runner)
    serving.chunks.arrivals = Arrivals(clock)
    b_admitted_at_arrival: dict[int, bool] = {}
    runner.on_arrival = lambda chunk: b_admitted_at_arrival.setdefault(
        len(b_admitted_at_arrival), gates["b"].done.is_set())

    async def go():
        a = asyncio.ensure_future(serving.score(items(3, "a")))
        b = asyncio.ensure_future(serving.score(items(4, "b")))
        gates["a"].open.set()
        await until(lambda: runner.live() or serving.chunks.arrivals.waiting,
                    "A's chunk queued, or A waiting for B")
        assert serving.chunks.arrivals.waiting == 1 and runner.live() == 0
        gates["b"].open.set()
        await until(lambda: runner.live() == 2, "both chunks queued")
        await runner.step()
        return await asyncio.gather(a, b)

    a, b = asyncio.run(go())
    assert len(a.unwrap().results) == 3 and len(b.unwrap().results) == 4
    assert len(runner.order) == 1 and len(runner.order[0]) == 2, runner.order
    assert b_admitted_at_arrival == {0: True, 1: True}  # no chunk was queued before B's admission
    assert a.queue_s > 0  # A's wait for B is reported as queue time


def test_the_wait_is_bounded_by_the_request_s_own_admission():
    """A request never waits longer than its own admission took, however long the others take,
    and never for admissions that started after it finished."""
    clock = Clock()
    arrivals = Arrivals(clock)
    slow = Gate(clock, 0.0)  # never opened until the end: an admission that takes "forever"
    quick = Gate(clock, 0.001)

    async def go():
        slow_task = asyncio.ensure_future(arrivals.admit(slow))
        await until(lambda: arrivals.admitting, "the slow admission under way")
        quick.open.set()
        _, took, waited = await arrivals.admit(quick)  # bounded by its own 1 ms
        assert not slow_task.done() and took == pytest.approx(0.001)
        alone_value, _, alone_waited = await arrivals.admit(lambda: "x")  # took 0: no wait
        assert alone_value == "x" and alone_waited == 0.0
        slow.open.set()
        await slow_task

    asyncio.run(go())


def test_an_admission_error_is_raised_without_waiting():
    clock = Clock()
    arrivals = Arrivals(clock)
    slow = Gate(clock, 0.0)

    def bad():
        clock.now += LONG_S  # would wait up to an hour if errors waited
        raise ValueError("items[0].target is empty")

    async def go():
        slow_task = asyncio.ensure_future(arrivals.admit(slow))
        await until(lambda: arrivals.admitting, "the slow admission under way")
        with pytest.raises(ValueError, match="target is empty"):
            await arrivals.admit(bad)
        assert not slow_task.done()  # the error came back while the other was still admitted
        slow.open.set()
        await slow_task

    asyncio.run(go())
