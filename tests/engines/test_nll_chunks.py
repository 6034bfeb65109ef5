"""NLLServing without Ray: a request is cut into token-sized chunks of whole items (a context's
items kept together where a cut can move), chunked scoring gives the numbers of one engine call,
chunks of concurrent requests are interleaved by a batching runner, and a cancelled request's
remaining chunks are dropped. Engine calls happen when the test says (a gated engine, a runner the
test steps): nothing here depends on how fast the machine is."""

from __future__ import annotations

import asyncio
import random
import threading

import pytest

from dialscore.model_card import ModelCard
from dialscore_server.checkpoints.loading import load_model
from dialscore_server.checkpoints.standins import reinit_
from dialscore_server.nll.engine.encoding import EncodedItem, NLLItem
from dialscore_server.nll.engine.engine import NLLEngine
from dialscore_server.nll.serving import NLLServing, chunk_items
from dialscore_server.scheduling.lanes import LanePolicy
from fake_api import FakeNLLEngine
from merging_runner import (
    MergingRunner, assert_only_the_running_chunk_was_wasted, cancel_during_first_call, until,
)


def item(source: int, cost: int) -> EncodedItem:
    """An encoded item of `cost` tokens whose source is identified by `source`."""
    return EncodedItem(source_ids=(source,) * (cost - 1), target_ids=(9,), truncated=False)


def test_chunks_hold_whole_items_in_order_within_the_budget():
    rng = random.Random(0)
    items = [item(rng.randrange(5), rng.randrange(2, 40)) for _ in range(300)]
    runs = [run for run, _ in chunk_items(items, 100)]
    assert [e for run in runs for e in run] == items
    assert all(sum(e.cost for e in run) <= 100 for run in runs)
    assert all(runs)


def test_a_cut_moves_back_to_keep_a_context_together():
    # 8 items of source 1 (80 tokens), then 3 of source 2 (30 tokens), then source 2 again:
    # the cut falls after source 1, not inside source 2's group.
    items = [item(1, 10)] * 8 + [item(2, 10)] * 3 + [item(2, 10)]
    runs = [run for run, _ in chunk_items(items, 100)]
    assert [len(r) for r in runs] == [8, 4]
    # A cut far from the change of source (under 3/4 of the budget) is not moved.
    items = [item(1, 10)] * 2 + [item(2, 10)] * 12
    assert [len(r) for r, _ in chunk_items(items, 100)] == [10, 4]
    # A single item larger than the budget is a chunk of its own.
    assert [len(r) for r, _ in chunk_items([item(1, 10), item(2, 300), item(3, 10)], 100)] == [1, 1, 1]


def shared_source(item: EncodedItem, after: EncodedItem | None) -> int:
    """An item's positions when a source repeated by the previous item is computed once."""
    return len(item.target_ids) if after and after.source_ids == item.source_ids else item.cost


def test_chunks_count_a_repeated_source_once():
    # 3 contexts of 8 items, 40-token sources and 5-token targets: 360 tokens per context, but
    # 75 positions computed (the source once, then 8 targets).
    items = [EncodedItem((c,) * 40, (9,) * 5, False) for c in range(3) for _ in range(8)]
    assert [len(r) for r, _ in chunk_items(items, 200)] == [4] * 6  # 45 tokens each
    costed = chunk_items(items, 200, shared_source)
    runs = [r for r, _ in costed]
    assert [len(r) for r in runs] == [16, 8]  # two contexts fit in 200 positions, whole
    assert all(cost == sum(shared_source(e, r[k - 1] if k else None) for k, e in enumerate(r))
               <= 200 for r, cost in costed)
    # A run's first item computes its source even when the previous run ended with the same one.
    assert [len(r) for r, _ in chunk_items(items[:8], 60, shared_source)] == [4, 4]


@pytest.fixture(scope="module")
def dialogpt(stand_in_registry) -> NLLEngine:
    lm = load_model(stand_in_registry.get("dialogpt-medium"))
    reinit_(lm.model, 0.3, seed=2)  # NLLs that vary by token and position
    return NLLEngine(lm.config, loaded=lm)


def test_chunked_scoring_equals_one_engine_call(dialogpt):
    rng = random.Random(1)
    words = "i you we like hate dogs cats tea coffee never always do not ok".split()
    contexts = [tuple(" ".join(rng.choices(words, k=rng.randrange(3, 12))) for _ in range(3))
                for _ in range(6)]
    items = [NLLItem(target=" ".join(rng.choices(words, k=rng.randrange(1, 8))), context=c)
             for c in contexts for _ in range(5)]
    whole = NLLServing(dialogpt, max_batch_tokens=16384, chunk_tokens=16384)
    chunked = NLLServing(dialogpt, max_batch_tokens=16384, chunk_tokens=64)
    assert len(chunked.admit(items)) > 4
    a = asyncio.run(whole.score(items)).unwrap().results
    b = asyncio.run(chunked.score(items)).unwrap().results
    assert [r.num_tokens for r in a] == [r.num_tokens for r in b]
    assert [r.nll for r in b] == pytest.approx([r.nll for r in a], abs=1e-4)
    assert len({round(r.nll, 3) for r in a}) > 20  # the numbers really differ by item
    stats = chunked.chunks.ledger.stats.snapshot()
    total = sum(w.tokens for w in chunked.admit(items))
    assert stats["done"] == total and stats["in_flight"] == 0 and stats["unit"] == "tokens"
    assert stats["calls"] == stats["chunks"] == len(chunked.admit(items))


def test_a_probe_request_is_one_engine_call_when_its_positions_fit(dialogpt):
    """Probe-shaped items (explanations after shared contexts) are chunked by what the engine
    computes: a request whose item tokens exceed chunk_tokens but whose positions fit is one
    chunk, so its contexts are computed once in one engine call."""
    ctx = tuple(f"turn {k} : i have been to the market and bought some tea ." for k in range(5))
    items = [NLLItem(context=(f"{c} ?",) + ctx, target=f"{k} : tea is good .")
             for c in range(2) for k in range(7)]
    serving = NLLServing(dialogpt, max_batch_tokens=16384, chunk_tokens=512)
    (work,) = serving.admit(items)
    _, stats = dialogpt.score_encoded(work.encoded)
    assert work.tokens > 512 >= work.positions == stats.real_tokens
    assert len(NLLServing(dialogpt, max_batch_tokens=16384, chunk_tokens=work.positions - 1).admit(items)) == 2


CARD = ModelCard(name="fake-gpt", family="causal", source="fake", revision=None, max_length=1024,
                 dtype="float32", device="cpu", stand_in=True)


class BlockingEngine(FakeNLLEngine):
    """The fake engine, recording each call's item count and holding every call until the test
    sets :attr:`release`."""

    def __init__(self):
        super().__init__(CARD)
        self.calls: list[int] = []
        self.release = threading.Event()

    def score_encoded(self, encoded, guard=None):
        self.calls.append(len(encoded))
        assert self.release.wait(60), "the test never released the engine"
        return super().score_encoded(encoded, guard)


def words(n: int) -> str:
    return " ".join(["w"] * n)


def test_a_cancelled_request_drops_its_remaining_chunks():
    engine = BlockingEngine()
    serving = NLLServing(engine, max_batch_tokens=8192, chunk_tokens=20)
    items = [NLLItem(target=words(8), context=(f"c{i}",)) for i in range(10)]  # 10 tokens each

    asyncio.run(cancel_during_first_call(serving.score(items), engine.calls, engine.release,
                                         serving.chunks.ledger))
    assert engine.calls == [2]
    assert_only_the_running_chunk_was_wasted(serving.chunks.ledger.stats.snapshot(), wasted=20,
                                             dropped=80)


def test_a_batching_runner_interleaves_chunks_of_concurrent_requests():
    """With a runner that merges what is waiting (as a replica does with lanes off), a small request sent
    after a large one rides in the second engine call, not after all of the large one's."""
    runner = MergingRunner()
    serving = NLLServing(FakeNLLEngine(CARD), max_batch_tokens=8192, chunk_tokens=20,
                         runner=runner)

    async def go():
        large_items = [NLLItem(target=words(8), context=(f"c{i}",)) for i in range(16)]
        large = asyncio.ensure_future(serving.score(large_items))
        await until(lambda: runner.live() == 1, "the large request's first chunk")
        await runner.step()  # the large request's first call; its second chunk is queued
        small = asyncio.ensure_future(serving.score([NLLItem(target="a b", context=("x",))]))
        await until(lambda: runner.live() == 2, "the small request beside the large one's chunk")
        await runner.step()
        await until(small.done, "the small request's answer")
        assert small.result().value is not None and not large.done()
        await runner.drain(large)
        return large.result()

    large = asyncio.run(go())
    assert len(large.unwrap().results) == 16
    order = runner.order
    assert order[:2] == [[20], [20, 4]] and len(order) == 8  # "x" + "a b" + eos: 4 tokens
    assert all(b.count(20) <= 1 for b in order)  # one chunk per request per call


class RecordingEngine(FakeNLLEngine):
    """The fake engine, recording the positions each call computes."""

    def __init__(self):
        super().__init__(CARD)
        self.calls: list[int] = []

    def score_encoded(self, encoded, guard=None):
        self.calls.append(sum(self.positions(e) for e in encoded))
        return super().score_encoded(encoded, guard)


def test_a_bulk_request_is_cut_to_bulk_max_batch_and_scores_the_same():
    """With ``bulk_max_batch`` below ``chunk_tokens``, a bulk request is cut into chunks of at most
    that many positions (whole items; an item larger than it alone), so no bulk engine call
    computes more; an interactive request keeps ``chunk_tokens``. Same results, same work."""
    items = [NLLItem(target=words(k % 7 + 1), context=(f"c{k}",)) for k in range(60)]
    items.append(NLLItem(target=words(40), context=("long",)))  # 42 positions: over the bound

    def serve(lane: str, cap: int | None) -> tuple[RecordingEngine, NLLServing, list[float]]:
        engine = RecordingEngine()
        serving = NLLServing(engine, max_batch_tokens=8192, chunk_tokens=200,
                             lanes=LanePolicy(interactive_max_cost=10_000, bulk_max_batch=cap))
        reply = asyncio.run(serving.score(items, lane=lane))
        assert reply.lane == lane
        return engine, serving, [r.nll for r in reply.unwrap().results]

    plain, plain_serving, expected = serve("interactive", 30)
    bulk, bulk_serving, got = serve("bulk", 30)
    uncut, _, uncut_nlls = serve("bulk", None)
    assert got == expected == uncut_nlls
    assert max(plain.calls) > 30 and uncut.calls == plain.calls  # the bound binds bulk alone
    assert [c for c in bulk.calls if c > 30] == [42]  # only the item larger than the bound
    assert len(bulk.calls) > len(plain.calls)
    assert (bulk_serving.chunks.ledger.stats.snapshot()["done"]
            == plain_serving.chunks.ledger.stats.snapshot()["done"])
