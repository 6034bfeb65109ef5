"""Engine calls that stop computing what nobody waits for, between forward passes
(dialscore_server.scheduling.cancellation).

The engines are real (stand-in checkpoints, weights re-initialised at std 0.3 so numbers vary by
token); "cancelling" is a guard whose `wanted` turns false at a chosen forward pass, counted by
hooks on the model, so every check is deterministic (no timing).
"""

from __future__ import annotations

import asyncio
import random
import threading
import time

import pytest

from dialscore_server.checkpoints.loading import load_model
from dialscore_server.checkpoints.standins import reinit_
from dialscore_server.contradiction.engine.classifier import NLIPairClassifier
from dialscore_server.contradiction.engine.engine import ContradictionDetector
from dialscore_server.contradiction.engine.pairing import DetectionJob, Turn
from dialscore_server.contradiction.serving import ContradictionServing
from dialscore_server.scheduling.cancellation import CallGuard
from dialscore_server.nll.engine.encoding import EncodedItem
from dialscore_server.nll.engine.engine import NLLEngine
from dialscore_server.nll.serving import NLLServing

TOL = 1e-4


@pytest.fixture()
def gpt2(stand_in_registry):
    """A fresh model per test: the tests hang hooks on it."""
    lm = load_model(stand_in_registry.get("dialogpt-medium"))
    reinit_(lm.model, 0.3, seed=3)
    return lm


@pytest.fixture()
def nli(stand_in_registry):
    return load_model(stand_in_registry.get("roberta-large-mnli"))


def items(vocab: int, groups: int, seed: int = 0) -> list[EncodedItem]:
    """Probe-shaped items: groups of 6 targets after one 40-60 token source, plus 6 lone items."""
    rng = random.Random(seed)

    def ids(k):
        return tuple(rng.randrange(vocab) for _ in range(k))

    out = []
    for _ in range(groups):
        src = ids(rng.randint(40, 60))
        out += [EncodedItem(src, ids(rng.randint(3, 12)), False) for _ in range(6)]
    out += [EncodedItem(ids(rng.randint(5, 30)), ids(rng.randint(2, 8)), False) for _ in range(6)]
    return out


@pytest.mark.parametrize("reuse", [True, False])
def test_items_dropped_between_passes_are_never_computed_and_the_rest_are_unchanged(gpt2, reuse):
    engine = NLLEngine(gpt2.config, loaded=gpt2, token_budget=256, prefix_reuse=reuse,
                       num_threads=1)
    encoded = items(gpt2.model.config.vocab_size, groups=6)
    want, _ = engine.score_encoded(encoded)
    passes = []
    engine.model.base_model.register_forward_pre_hook(lambda *_: passes.append(1))
    _, full = engine.score_encoded(encoded)
    planned = len(passes)
    assert planned >= 4

    # The first half of the items stop being wanted when the second pass begins.
    dropped = set(range(len(encoded) // 2))
    passes.clear()
    guard = CallGuard(lambda i: not (len(passes) >= 2 and i in dropped))
    got, cut = engine.score_encoded(encoded, guard)
    assert len(passes) <= planned and cut.real_tokens < full.real_tokens
    assert guard.skipped > 0
    for i, (a, b) in enumerate(zip(got, want)):
        if a is None:
            assert i in dropped
        else:
            assert a.token_ids == b.token_ids
            assert max(abs(x - y) for x, y in zip(a.token_nlls, b.token_nlls)) < TOL
    assert all(got[i] is not None for i in range(len(encoded)) if i not in dropped)
    # time is charged to what was computed, and only to that
    assert set(guard.seconds) <= set(range(len(encoded)))
    assert sum(guard.seconds.values()) > 0


def test_the_classifier_leaves_out_pairs_nobody_wants(nli):
    clf = NLIPairClassifier(nli.config, nli, token_budget=160, num_threads=1)
    rng = random.Random(1)
    words = "i you have a dog cat never like fish not do went home today".split()
    pairs = [(" ".join(rng.choices(words, k=rng.randint(3, 12))),
              " ".join(rng.choices(words, k=rng.randint(3, 12)))) for _ in range(40)]
    pairs += pairs[:4]  # pairs 40-43 repeat 0-3: one row each, wanted if either copy is
    copy = {i: i + 40 for i in range(4)} | {i + 40: i for i in range(4)}
    want = clf.contradiction_probs(pairs)
    passes = []
    clf.model.register_forward_pre_hook(lambda *_: passes.append(1))
    dropped = set(range(0, 40, 2)) | {42}  # from the first pass on; 40 (copy of 0) stays wanted
    guard = CallGuard(lambda i: not (passes and i in dropped))
    got = clf.contradiction_probs(pairs, guard)
    assert guard.skipped > 0 and len(passes) >= 2
    for i, (a, b) in enumerate(zip(got, want)):
        if a != a:  # NaN: left out, so neither copy of the row was wanted
            assert i in dropped and copy.get(i, i) in dropped
        else:
            assert a == pytest.approx(b, abs=TOL)
    assert got[0] == got[0] and got[2] != got[2]  # 0 kept for its wanted copy; 2 and 42 left out


def test_a_request_cancelled_mid_call_stops_the_engine_and_counts_only_what_ran(gpt2):
    """Served path: a request of one large chunk is cancelled while its engine call runs (when
    its second forward pass begins); the call leaves it out of the passes after that one, the
    ledger counts part of the call as wasted, and a request merged into the same call is
    answered in full."""
    engine = NLLEngine(gpt2.config, loaded=gpt2, token_budget=256, prefix_reuse=False,
                       num_threads=1)
    serving = NLLServing(engine, max_batch_tokens=100_000, chunk_tokens=100_000)
    vocab = gpt2.model.config.vocab_size
    passes = []
    engine.model.base_model.register_forward_pre_hook(lambda *_: passes.append(1))

    def call(cancel_at: int | None):
        large = serving.cut_into_chunks(items(vocab, groups=8, seed=1))
        small = serving.cut_into_chunks(items(vocab, groups=1, seed=2)[:3])
        assert len(large) == 1 and len(small) == 1
        passes.clear()

        def on_pass(*_):
            if len(passes) == cancel_at:  # what take_turns does when its caller is cancelled
                large[0].cancelled_at = time.perf_counter()
                large[0].cancelled = True

        handle = engine.model.base_model.register_forward_pre_hook(on_pass)
        try:
            return serving.chunks.call(large + small), len(passes), small
        finally:
            handle.remove()

    (full_large, full_small), full_passes, _ = call(None)
    before = serving.chunks.ledger.stats.snapshot()
    assert before["wasted_s"] == 0
    (cut_large, cut_small), cut_passes, small = call(2)
    assert cut_large.value is None and cut_small.value is not None
    assert cut_passes < full_passes
    for a, b in zip(cut_small.value, full_small.value):
        assert a.nll == pytest.approx(b.nll, abs=TOL)
    after = serving.chunks.ledger.stats.snapshot()
    call_s = after["busy_s"] - before["busy_s"]
    assert 0 < after["wasted_s"] < call_s
    # after the cancel only the pass then running is charged to the cancelled request
    assert 0 < after["orphan_s"] < after["wasted_s"]


def test_the_next_chunk_is_queued_while_the_current_one_runs():
    """take_turns sends a request's next chunk as soon as the current chunk's engine call
    begins: the replica never waits for a round trip between two chunks of a request."""
    from dialscore.model_card import ModelCard
    from dialscore_server.nll.engine.encoding import NLLItem
    from fake_api import FakeNLLEngine
    from merging_runner import MergingRunner, until

    card = ModelCard(name="fake", family="causal", source="fake", revision="fake",
                     max_length=1024, dtype="float32", device="cpu", stand_in=True)
    release = threading.Event()

    class Engine(FakeNLLEngine):
        def score_encoded(self, encoded, guard=None):
            assert release.wait(60), "the test never released the engine"
            return super().score_encoded(encoded, guard)

    runner = MergingRunner()
    serving = NLLServing(Engine(card), max_batch_tokens=8192, chunk_tokens=20, runner=runner)

    async def go():
        request = asyncio.ensure_future(serving.score(
            [NLLItem(target="a b c d e f g h", source="x y z " * 4) for _ in range(6)]))
        await until(lambda: runner.live() == 1, "the first chunk")
        first_call = asyncio.ensure_future(runner.step())
        # the first call is held in the engine: the second chunk arrives meanwhile
        await until(lambda: len(runner.arrived) == 2, "the second chunk, while the first call runs")
        assert not first_call.done()
        release.set()
        await first_call
        await runner.drain(request)
        return request.result()

    reply = asyncio.run(go())
    assert reply.error is None and len(reply.value.results) == 6
    assert len(runner.order) >= 3 and all(len(b) == 1 for b in runner.order)


def test_detector_jobs_left_out_get_none(nli):
    clf = NLIPairClassifier(nli.config, nli, token_budget=64, num_threads=1)
    detector = ContradictionDetector(classifier=clf)
    dialogue = [Turn("a", "I have a dog."), Turn("b", "Nice."), Turn("a", "I never had pets."),
                Turn("b", "Oh."), Turn("a", "My dog is old.")]
    jobs = [DetectionJob([dialogue] * 4), DetectionJob([dialogue[:3]])]
    want = detector.detect_many(jobs)
    guard = CallGuard(lambda j: j != 0)
    got = detector.detect_many(jobs, guard)
    assert got[0] is None and got[1] == want[1]
    serving = ContradictionServing(detector, max_batch_pairs=4096)
    works = serving.admit(jobs[0]) + serving.admit(jobs[1])
    works[0].cancelled = True
    outcomes = serving.chunks.call(works)
    assert outcomes[0].value is None and outcomes[-1].value == want[1]


