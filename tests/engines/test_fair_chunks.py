"""ContradictionServing without Ray: how a job is cut into chunks, that chunks of concurrent
requests are interleaved by a batching runner, and the accounting of work done, dropped and
wasted when a request is cancelled. Engine calls happen when the test says (a gated classifier, a
runner the test steps): nothing here depends on how fast the machine is."""

from __future__ import annotations

import asyncio
import threading


from dialscore.model_card import ModelCard
from dialscore_server.contradiction.engine.engine import ContradictionDetector
from dialscore_server.contradiction.engine.pairing import DetectionJob, Turn
from dialscore_server.contradiction.serving import ContradictionServing, chunk_job
from merging_runner import (
    MergingRunner, assert_only_the_running_chunk_was_wasted, cancel_during_first_call, until,
)


def dialogue(pairs: int) -> list[Turn]:
    """A dialogue whose last turn has `pairs` earlier turns of its speaker."""
    return [Turn(1, f"t{j}") for j in range(pairs)] + [Turn(1, "last")]


class GatedDetector:
    """A real ContradictionDetector over a fake classifier that records each call's pairs; with
    `gated`, each call waits until the test sets :attr:`release`."""

    def __init__(self, gated: bool = False):
        self.calls: list[int] = []
        self.release = threading.Event()
        if not gated:
            self.release.set()
        self.detector = ContradictionDetector(classifier=self._probs)

    def _probs(self, pairs):
        self.calls.append(len(pairs))
        assert self.release.wait(60), "the test never released the engine"
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
    engine = GatedDetector()
    serving = ContradictionServing(engine, max_batch_pairs=4096, chunk_pairs=16)
    job = DetectionJob([dialogue(n) for n in (3, 20, 7, 9, 1)])
    reply = asyncio.run(serving.detect(job))
    assert reply.value == engine.detect_many([job])[0]
    assert engine.calls[:4] == [3, 20, 16, 1]   # chunks: [3], [20], [7, 9], [1]
    stats = serving.chunks.ledger.stats.snapshot()
    assert stats["done"] == 40 and stats["in_flight"] == 0 and stats["chunks"] == 4


def test_a_cancelled_request_drops_its_remaining_chunks():
    engine = GatedDetector(gated=True)
    serving = ContradictionServing(engine, max_batch_pairs=4096, chunk_pairs=10)
    job = DetectionJob([dialogue(10) for _ in range(6)])

    asyncio.run(cancel_during_first_call(serving.detect(job), engine.calls, engine.release,
                                         serving.chunks.ledger))
    assert engine.calls == [10]
    assert_only_the_running_chunk_was_wasted(serving.chunks.ledger.stats.snapshot(), wasted=10, dropped=50)


def test_a_batching_runner_interleaves_chunks_of_concurrent_requests():
    """With a runner that merges what is waiting (as a replica does with lanes off), a small request sent
    after a large one is in the second engine call, not after all of the large one's."""
    runner = MergingRunner()
    serving = ContradictionServing(GatedDetector(), max_batch_pairs=4096, chunk_pairs=10,
                                   runner=runner)

    async def go():
        large = asyncio.ensure_future(serving.detect(DetectionJob([dialogue(10)] * 8)))
        await until(lambda: runner.live() == 1, "the large request's first chunk")
        await runner.step()  # the large request's first call; its second chunk is queued
        small = asyncio.ensure_future(serving.detect(DetectionJob([dialogue(1)])))
        await until(lambda: runner.live() == 2, "the small request beside the large one's chunk")
        await runner.step()
        await until(small.done, "the small request's answer")
        assert small.result().value is not None and not large.done()
        await runner.drain(large)
        assert large.result().value is not None

    asyncio.run(go())
    order = runner.order
    assert order[:2] == [[10], [10, 1]] and len(order) == 8
    assert all(b.count(10) <= 1 for b in order)  # one chunk per request per call
