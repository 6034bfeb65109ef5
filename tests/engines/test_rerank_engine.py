"""The reranker engine: candidate speaker, ordering, weights, the NLL hook (sync and async), the
TEI query split, and the real stand-in classifier."""

from __future__ import annotations

import asyncio

import pytest

from dialscore_server.contradiction.engine.classifier import NLIPairClassifier
from dialscore_server.contradiction.engine.engine import ContradictionDetector
from dialscore_server.contradiction.engine.pairing import DetectionJob, Evidence, Turn
from dialscore_server.contract.errors import InputError
from dialscore_server.rerank.engine.reranker import (
    DEFAULT_NLL_WEIGHT, Reranker, RerankWeights, candidate_speaker, query_context,
)


class FakeClassifier:
    """P(contradiction) of a pair from its hypothesis (the candidate); records every call."""

    def __init__(self, by_hypothesis: dict[str, float], default: float = 0.0):
        self.by_hypothesis = by_hypothesis
        self.default = default
        self.calls: list[list[tuple[str, str]]] = []

    def contradiction_probs(self, pairs):
        self.calls.append(list(pairs))
        return [self.by_hypothesis.get(h, self.default) for _, h in pairs]


CONTEXT = [Turn("bot", "I have a dog."), Turn("user", "What breed?"),
           Turn("bot", "A poodle."), Turn("user", "Do you walk it?")]


def reranker(table, default=0.0):
    fake = FakeClassifier(table, default)
    return Reranker(ContradictionDetector(classifier=fake)), fake


# ------------------------------------------------------------------------------------ speaker
def test_candidate_speaker_is_whoever_did_not_speak_last():
    assert candidate_speaker(CONTEXT) == "bot"
    assert candidate_speaker(CONTEXT[:3]) == "user"
    assert candidate_speaker([Turn(1, "a"), Turn(2, "b"), Turn(3, "c")]) == 2
    assert candidate_speaker([Turn(1, "a"), Turn("1", "b")]) == 1  # 1 and "1" differ
    assert candidate_speaker(CONTEXT, "narrator") == "narrator"
    # No other speaker: a fresh one, whose candidate cannot contradict anything.
    assert candidate_speaker([]) == "candidate"
    assert candidate_speaker([Turn("u", "a"), Turn("u", "b")]) == "candidate"
    assert candidate_speaker([Turn("candidate", "a")]) == "candidate_2"


def test_only_the_candidate_speakers_turns_are_paired_and_evidence_names_context_ids():
    rr, fake = reranker({"I have no pets.": 0.9})
    ctx = [Turn(t.speaker, t.text, f"t{i}") for i, t in enumerate(CONTEXT)]
    out = rr.rerank(ctx, ["Every day.", "I have no pets."])
    assert fake.calls == [[("I have a dog.", "Every day."), ("A poodle.", "Every day."),
                           ("I have a dog.", "I have no pets."), ("A poodle.", "I have no pets.")]]
    assert [r.index for r in out.results] == [0, 1]
    worst = out.results[1]
    assert worst.is_contradiction and worst.contradiction_probability == 0.9
    assert worst.evidence == (Evidence("t0", 0.9), Evidence("t2", 0.9))
    assert out.speaker == "bot" and out.weights == RerankWeights(1.0, 0.0)


def test_explicit_speaker_and_candidate_id_never_clash_with_context_ids():
    rr, fake = reranker({}, default=0.7)
    ctx = [Turn("a", "x", 2), Turn("b", "y", 0)]  # the candidate's position id (2) is taken
    out = rr.rerank(ctx, ["z"], speaker="b")
    assert fake.calls == [[("y", "z")]]
    assert out.results[0].evidence == (Evidence(0, 0.7),)


# ------------------------------------------------------------------------------------ ordering
def test_order_is_by_score_best_first_stable_and_truncated_to_top_n():
    probs = {"c0": 0.2, "c1": 0.9, "c2": 0.2, "c3": 0.0, "c4": 0.5}
    rr, _ = reranker(probs)
    cands = list(probs)
    out = rr.rerank(CONTEXT, cands)
    scores = [r.score for r in out.results]
    assert scores == sorted(scores, reverse=True)
    assert [r.index for r in out.results] == [3, 0, 2, 4, 1]  # c0 before c2: tie keeps input order
    assert all(r.score == -probs[cands[r.index]] for r in out.results)
    assert out.results[0].score == 0.0 and str(out.results[0].score) == "0.0"  # never -0.0
    assert [r.index for r in rr.rerank(CONTEXT, cands, top_n=2).results] == [3, 0]
    assert len(rr.rerank(CONTEXT, cands, top_n=99).results) == 5


def fake_nll(table):
    calls = []

    def nll_fn(context_texts, candidates):
        calls.append((list(context_texts), list(candidates)))
        return [table[c] for c in candidates]

    return nll_fn, calls


def test_weights_change_the_order_as_documented():
    rr, _ = reranker({"consistent but odd": 0.3, "fluent but contradictory": 0.35})
    cands = ["consistent but odd", "fluent but contradictory"]
    nll_fn, calls = fake_nll({"consistent but odd": 4.0, "fluent but contradictory": 1.0})
    # Contradiction only (no NLL model): the less contradictory candidate wins.
    out = rr.rerank(CONTEXT, cands)
    assert [r.index for r in out.results] == [0, 1] and out.results[0].nll is None
    # With an NLL model and the default weights (1.0, 0.1): 0.3 + 0.4 > 0.35 + 0.1.
    out = rr.rerank(CONTEXT, cands, nll_fn=nll_fn)
    assert out.weights == RerankWeights(1.0, DEFAULT_NLL_WEIGHT)
    assert [r.index for r in out.results] == [1, 0]
    assert out.results[0].score == pytest.approx(-(0.35 + 0.1 * 1.0))
    assert out.results[0].nll == 1.0
    assert calls[0] == ([t.text for t in CONTEXT], cands)
    # NLL reported but not weighted.
    out = rr.rerank(CONTEXT, cands, nll_fn=nll_fn, weights=RerankWeights(nll=0.0))
    assert [r.index for r in out.results] == [0, 1] and out.results[1].nll == 1.0
    # A large contradiction weight outweighs the NLL again.
    out = rr.rerank(CONTEXT, cands, nll_fn=nll_fn, weights=RerankWeights(contradiction=100.0))
    assert [r.index for r in out.results] == [0, 1]
    # NLL only.
    out = rr.rerank(CONTEXT, cands, nll_fn=nll_fn, weights=RerankWeights(0.0, 1.0))
    assert [(r.index, r.score) for r in out.results] == [(1, -1.0), (0, -4.0)]


def test_bad_input_names_the_field():
    rr, _ = reranker({})
    nll_fn, _ = fake_nll({"a": 1.0})
    cases = [
        (dict(candidates=[]), "candidates"),
        (dict(weights=RerankWeights(nll=0.5)), "weights.nll"),  # no NLL model
        (dict(weights=RerankWeights(contradiction=-1.0)), "weights.contradiction"),
        (dict(weights=RerankWeights(nll=float("inf")), nll_fn=nll_fn), "weights.nll"),
        (dict(top_n=0), "top_n"),
        (dict(threshold=2.0), "threshold"),
        (dict(mode="sideways"), "mode"),
        (dict(context=[Turn("a", "x", 1), Turn("b", "y")]), "context[1].id"),
    ]
    for kwargs, param in cases:
        args = dict(context=CONTEXT, candidates=["a"]) | kwargs
        with pytest.raises(InputError) as e:
            rr.rerank(args.pop("context"), args.pop("candidates"), **args)
        assert e.value.param == param, kwargs


def test_empty_context_is_valid_and_nothing_contradicts():
    rr, fake = reranker({}, default=1.0)
    out = rr.rerank([], ["hi", "hello"])
    assert [(r.index, r.score, r.contradiction_probability) for r in out.results] == [(0, 0.0, 0.0), (1, 0.0, 0.0)]
    assert fake.calls == []


# ------------------------------------------------------------------------------------ async
def test_arerank_awaits_async_nll_and_detector_functions():
    rr, fake = reranker({"b": 0.1})  # scores: a = -(0 + 0.1 * 2.0), b = -(0.1 + 0)
    detector = rr.detector

    async def nll_fn(context_texts, candidates):
        await asyncio.sleep(0)
        return [2.0 if c == "a" else 0.0 for c in candidates]

    async def detect(job: DetectionJob):
        await asyncio.sleep(0)
        return detector.detect_many([job])[0]

    out = asyncio.run(rr.arerank(CONTEXT, ["a", "b"], nll_fn=nll_fn))
    assert [(r.index, r.nll) for r in out.results] == [(1, 0.0), (0, 2.0)]
    via_fn = asyncio.run(Reranker(detect).arerank(CONTEXT, ["a", "b"], nll_fn=nll_fn))
    assert via_fn == out
    # The sync API runs awaitables to completion when no loop is running...
    assert rr.rerank(CONTEXT, ["a", "b"], nll_fn=nll_fn) == out
    assert Reranker(detect).rerank(CONTEXT, ["a", "b"], nll_fn=nll_fn) == out

    # ...and refuses them inside a running loop.
    async def inside():
        with pytest.raises(RuntimeError, match="arerank"):
            rr.rerank(CONTEXT, ["a"], nll_fn=nll_fn)

    asyncio.run(inside())


def test_arerank_cancels_the_nll_call_when_detection_fails():
    cancelled = []

    async def slow_nll(context_texts, candidates):
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            cancelled.append(True)
            raise
        return [0.0] * len(candidates)

    async def failing_detect(job):
        await asyncio.sleep(0.01)  # the NLL call is under way by now
        raise RuntimeError("replica died")

    async def run():
        with pytest.raises(RuntimeError, match="replica died"):
            await Reranker(failing_detect).arerank(CONTEXT, ["a"], nll_fn=slow_nll)
        await asyncio.sleep(0)

    asyncio.run(run())
    assert cancelled == [True]


# ------------------------------------------------------------------------------------ TEI query
def test_query_splits_into_lines_with_alternating_speakers_ending_before_the_candidate():
    turns = query_context("I have a dog.\r\n\n  What breed?  \nA poodle.\rDo you walk it?\n")
    assert [(t.id, t.speaker, t.text) for t in turns] == [
        (0, "A", "I have a dog."), (1, "B", "What breed?"), (2, "A", "A poodle."),
        (3, "B", "Do you walk it?")]
    assert [(t.speaker, t.text) for t in query_context("just one line")] == [("B", "just one line")]
    assert query_context("  \n\n") == []


def test_tei_request_orders_like_v1_rerank():
    from dialscore_server.rerank.protocol import RerankRequest
    from dialscore_server.rerank.tei.protocol import TEIRerankRequest, tei_results

    rr, _ = reranker({"I have no pets.": 0.9, "Every day.": 0.1, "Sometimes.": 0.1})
    cands = ["I have no pets.", "Every day.", "Sometimes."]
    tei = TEIRerankRequest.model_validate(
        {"query": "\n".join(t.text for t in CONTEXT), "texts": cands, "return_text": True})
    out_tei = rr.rerank(tei.to_context(), tei.texts, **tei.options().kwargs())
    v1 = RerankRequest.model_validate(
        {"context": [{"speaker": t.speaker, "text": t.text} for t in CONTEXT], "candidates": cands})
    out_v1 = rr.rerank(v1.to_context(), v1.candidates, **v1.options().kwargs())
    assert [r.index for r in out_tei.results] == [r.index for r in out_v1.results] == [1, 2, 0]
    body = tei_results(tei, out_tei)
    assert body == [{"index": 1, "score": pytest.approx(0.9), "text": "Every day."},
                    {"index": 2, "score": pytest.approx(0.9), "text": "Sometimes."},
                    {"index": 0, "score": pytest.approx(0.1), "text": "I have no pets."}]
    # raw_scores (TEI: logits) is refused, naming the field, not answered with something else.
    raw = TEIRerankRequest.model_validate({"query": tei.query, "texts": cands, "raw_scores": True})
    with pytest.raises(InputError) as e:
        raw.check_options()
    assert e.value.param == "raw_scores"


def test_query_without_an_earlier_candidate_turn_is_refused_not_tied():
    from dialscore_server.rerank.engine.reranker import require_candidate_turn

    require_candidate_turn(query_context("I love dogs.\nDo you?"))
    for query in ("just one line", "  \n\n"):
        with pytest.raises(InputError) as e:
            require_candidate_turn(query_context(query))
        assert (e.value.param, e.value.status) == ("query", 422)


# ------------------------------------------------------------------------------------ real model
@pytest.fixture(scope="module")
def real_detector(stand_in_registry):
    from dialscore_server.checkpoints.loading import load_model
    from dialscore_server.checkpoints.standins import reinit_

    loaded = load_model(stand_in_registry.get("roberta-large-anli"))
    reinit_(loaded.model, 0.3)
    return ContradictionDetector(classifier=NLIPairClassifier(loaded.config, loaded, num_threads=1))


def test_real_rerank_order_equals_sorting_by_scores_and_matches_the_detector(real_detector):
    rr = Reranker(real_detector)
    cands = ["I do not have any pets.", "yes, I love to cook pasta.", "I live in a small town.",
             "my sister failed the exam.", "pizza, definitely.", "we moved to a new city."]
    nll_fn, _ = fake_nll({c: 0.5 * i for i, c in enumerate(cands)})
    for kwargs in ({}, {"nll_fn": nll_fn}, {"mode": "unstructured"}):
        out = rr.rerank(CONTEXT, cands, evidence_threshold=0.0, **kwargs)
        scores = [r.score for r in out.results]
        assert scores == sorted(scores, reverse=True)
        assert sorted(r.index for r in out.results) == list(range(len(cands)))
        assert len({round(s, 6) for s in scores}) > 1  # the stand-in's probabilities vary
        for r in out.results:
            [alone] = real_detector.detect([CONTEXT + [Turn("bot", cands[r.index])]],
                                           mode=kwargs.get("mode", "structured"),
                                           evidence_threshold=0.0)
            assert r.contradiction_probability == pytest.approx(alone.probability, abs=1e-5)
            assert [e.turn for e in r.evidence] == [e.turn for e in alone.evidence]
    out = asyncio.run(rr.arerank(CONTEXT, cands, top_n=3))
    assert [r.index for r in out.results] == [r.index for r in rr.rerank(CONTEXT, cands).results][:3]
