"""ContradictionServing without Ray: how a job is cut into chunks, that chunks of concurrent
requests are interleaved by a batching runner, and the accounting of work done, dropped and
wasted when a request is cancelled."""

from __future__ import annotations

import asyncio
import threading

from dialscore.model_card import ModelCard
from dialscore_server.contradiction.engine.engine import ContradictionDetector
from dialscore_server.contradiction.engine.pairing import DetectionJob, Turn
from dialscore_server.contradiction.serving import ContradictionServing, chunk_job
from merging_runner import (
    MergingRunner, assert_only_the_running_chunk_was_wasted, cancel_while_first_chunk_runs,
)


def dialogue(pairs: int) -> list[Turn]:
    """A dialogue whose last turn has `pairs` earlier turns of its speaker."""
    return [Turn(1, f"t{j}") for j in range(pairs)] + [Turn(1, "last")]


class SlowDetector:
    """A real ContradictionDetector over a fake classifier that records each call's pairs."""

    def __init__(self, delay: float = 0.0):
        self.calls: list[int] = []
        self.delay = delay
        self.release = threading.Event()
        self.detector = ContradictionDetector(classifier=self._probs)

    def _probs(self, pairs):
        self.calls.append(len(pairs))
        if self.delay:
            self.release.wait(self.delay)
        return [0.1] * len(pairs)

    def detect_many(self, jobs, guard=None):
        return self.detector.detect_many(jobs, guard)

    def card(self) -> ModelCard:
        return ModelCard(name="fake-nli", family="classifier", source="fake", revision=None,
                         max_length=512, dtype="float32", device="cpu", stand_in=True)

    def check_health(self) -> None:
        pass


def test_chunks_hold_whole_dialogues_in_order():
    job = DetectionJob([dialogue(n) for n in (10, 30, 30, 100, 5, 0)])
    works = chunk_job(job, [10, 30, 30, 100, 5, 0], 64)
    assert [len(w.job.dialogues) for w in works] == [2, 1, 1, 2]
    assert [w.pairs for w in works] == [40, 30, 100, 5]
    assert [d for w in works for d in w.job.dialogues] == list(job.dialogues)


def test_results_equal_an_unchunked_run_and_every_pair_is_counted_done():
    engine = SlowDetector()
    serving = ContradictionServing(engine, max_batch_pairs=4096, chunk_pairs=16)
    job = DetectionJob([dialogue(n) for n in (3, 20, 7, 9, 1)])
    reply = asyncio.run(serving.detect(job))
    assert reply.value == engine.detect_many([job])[0]
    assert engine.calls[:4] == [3, 20, 16, 1]   # chunks: [3], [20], [7, 9], [1]
    stats = serving.ledger.stats.snapshot()
    assert stats["done"] == 40 and stats["in_flight"] == 0 and stats["chunks"] == 4


def test_a_cancelled_request_drops_its_remaining_chunks():
    engine = SlowDetector(delay=5.0)
    serving = ContradictionServing(engine, max_batch_pairs=4096, chunk_pairs=10)
    job = DetectionJob([dialogue(10) for _ in range(6)])

    asyncio.run(cancel_while_first_chunk_runs(serving.detect(job), engine.calls, engine.release))
    stats = serving.ledger.stats.snapshot()
    assert engine.calls == [10]
    assert_only_the_running_chunk_was_wasted(stats, wasted=10, dropped=50)


def test_a_batching_runner_interleaves_chunks_of_concurrent_requests():
    """With a runner that merges what is waiting (as @serve.batch does), a small request sent
    after a large one is in the second engine call, not after all of the large one's."""
    serving = ContradictionServing(SlowDetector(), max_batch_pairs=4096, chunk_pairs=10)
    runner = MergingRunner(serving.run)

    async def go():
        large = asyncio.create_task(serving.detect(DetectionJob([dialogue(10)] * 8), runner))
        b = asyncio.create_task(runner.serve())
        await asyncio.sleep(0.015)
        small = await serving.detect(DetectionJob([dialogue(1)]), runner)
        assert small.value is not None and not large.done()
        await large
        b.cancel()

    asyncio.run(go())
    order = runner.order
    # the small request's single pair rides in an early engine call beside one large chunk
    first_with_small = next(i for i, b in enumerate(order) if 1 in b)
    assert first_with_small <= 2 and len(order) >= 8
    assert all(b.count(10) <= 1 for b in order)  # one chunk per request per call
