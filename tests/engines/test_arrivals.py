"""Requests tokenized at the same time meet the engine together (dialscore_server.scheduling.arrivals): a
request that finishes tokenizing waits for the ones already being tokenized, at most as long as
its own tokenizing took, so concurrent requests share one engine call instead of the first
running alone."""

from __future__ import annotations

import asyncio
import time

from dialscore.model_card import ModelCard
from dialscore_server.scheduling.arrivals import Arrivals
from dialscore_server.nll.engine.encoding import NLLItem
from dialscore_server.nll.serving import NLLServing
from fake_api import FakeNLLEngine
from merging_runner import MergingRunner

CARD = ModelCard(name="fake-gpt", family="causal", source="fake", revision=None, max_length=1024,
                 dtype="float32", device="cpu", stand_in=True)


class SlowTokenizer(FakeNLLEngine):
    """The fake engine, taking `seconds_per_item` to encode an item (tokenizing is CPU work off
    the event loop; a sleep stands for it)."""

    def __init__(self, seconds_per_item: float):
        super().__init__(CARD)
        self.seconds_per_item = seconds_per_item

    def encode(self, item):
        time.sleep(self.seconds_per_item)
        return super().encode(item)


def items(n: int, tag: str) -> list[NLLItem]:
    return [NLLItem(target="a b c", context=(f"{tag} {i}",)) for i in range(n)]


def test_concurrent_requests_share_the_first_engine_call():
    """A tokenizes for 0.3 s; B starts 20 ms after A and tokenizes for 0.4 s, so it finishes about
    0.12 s after A, far outside the runner's 40 ms batch window. Without the wait A's chunk would
    run alone; with it, A waits for B (at most its own 0.3 s) and both ride in the first call.
    The margins are a tenth of a second either way, so a loaded machine does not flip it."""
    serving = NLLServing(SlowTokenizer(0.1), max_batch_tokens=8192)
    runner = MergingRunner(serving.run)

    async def go():
        batches = asyncio.create_task(runner.serve(window_s=0.04))
        a = asyncio.create_task(serving.score(items(3, "a"), runner=runner))
        await asyncio.sleep(0.02)
        b = asyncio.create_task(serving.score(items(4, "b"), runner=runner))
        replies = await asyncio.gather(a, b)
        batches.cancel()
        return replies

    a, b = asyncio.run(go())
    assert len(a.unwrap().results) == 3 and len(b.unwrap().results) == 4
    assert len(runner.order[0]) == 2, runner.order  # one chunk of each request in the first call
    # A's wait for B (about 0.12 s) is reported as queue time, beside the 40 ms batch window
    assert a.queue_s >= 0.1, a.queue_s


def test_the_wait_is_bounded_by_the_request_s_own_tokenizing():
    """A request never waits longer than its own tokenizing took, however long the others take,
    and never for requests that started tokenizing after it finished."""
    arrivals = Arrivals()

    async def go():
        slow = asyncio.create_task(arrivals.admit(lambda: time.sleep(1.0)))
        await asyncio.sleep(0.01)
        _, took, waited = await arrivals.admit(lambda: time.sleep(0.05))
        assert not slow.done()
        assert 0.03 <= waited <= took + 0.1
        _, _, alone = await arrivals.admit(lambda: None)  # `slow` is still tokenizing...
        await slow
        return alone

    alone = asyncio.run(go())
    assert alone < 0.1  # ...but it waited at most its own (near zero) tokenizing time


def test_a_tokenizing_error_is_raised_without_waiting():
    arrivals = Arrivals()

    def bad():
        raise ValueError("items[0].target is empty")

    async def go():
        slow = asyncio.create_task(arrivals.admit(lambda: time.sleep(0.5)))
        await asyncio.sleep(0.01)
        start = time.perf_counter()
        try:
            await arrivals.admit(bad)
        except ValueError:
            pass
        else:
            raise AssertionError("the error was swallowed")
        elapsed = time.perf_counter() - start
        await slow
        return elapsed

    assert asyncio.run(go()) < 0.2
