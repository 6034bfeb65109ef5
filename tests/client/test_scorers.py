"""Each Scorer against the fake API: what it scores (higher = better, against the service's own
answers), how it batches within the published limits, halving on a 413 when they are unknown,
and which models it reports; the runners' chunking follows the published limits too."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from dialscore.client import AsyncDialscoreClient
from dialscore.evals.scorers import (
    ContradictionScorer, NLLScorer, ReplyCandidates, RerankScorer, make_scorer,
)
from dialscore.types import Turn
from contract_fake import FAKE_CARDS, ContractFake, hash_nll

SERVED = {c.name: c for c in FAKE_CARDS}
CONTEXT = (Turn(id=0, speaker="bot", text="i have a dog ."), Turn(id=1, speaker="user", text="nice ."))
REPLIES = ("i do not have a dog .", "i like cats .", "my dog is old .", "i have never had a dog .",
           "it barks .")


class Recorded(httpx.AsyncBaseTransport):
    """The fake API's transport, recording each request's path, JSON body and status; with
    `publish_limits=False` the deployment publishes none (GET /openapi.json is a 404)."""

    def __init__(self, api: ContractFake, publish_limits: bool = True):
        self.inner = api.transport()
        self.publish_limits = publish_limits
        self.sent: list[tuple[str, dict, int]] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == "/openapi.json" and not self.publish_limits:
            return httpx.Response(404, json={"detail": "Not Found"})
        response = await self.inner.handle_async_request(request)
        body = json.loads(request.content) if request.content else {}
        self.sent.append((request.url.path, body, response.status_code))
        return response

    def bodies(self, path: str, status: int = 200) -> list[dict]:
        return [b for p, b, s in self.sent if p == path and s == status]


def score(scorer, jobs, transport, **kw):
    async def go():
        async with AsyncDialscoreClient("http://fake", transport=transport, **kw) as client:
            return await scorer.score(client, jobs, label="test", progress=False)

    return asyncio.run(go())


def direct(transport, call):
    async def go():
        async with AsyncDialscoreClient("http://fake", transport=transport) as client:
            return await call(client)

    return asyncio.run(go())


def test_nll_scorer_is_minus_the_nll_of_each_distinct_item_within_max_items():
    api = ContractFake(limits={"max_items": 2})
    jobs = [ReplyCandidates(CONTEXT, REPLIES[:3] + REPLIES[:1], "bot"),
            ReplyCandidates(CONTEXT[:1], REPLIES[3:], "user")]
    scorer = NLLScorer("fake-gpt", chunk_size=64)
    got = score(scorer, jobs, api.transport())
    for job, row in zip(jobs, got):
        assert len(row) == len(job.texts)
        for text, s in zip(job.texts, row):
            nll = hash_nll("fake-gpt", {"context": [t.text for t in job.context], "target": text})
            assert (s.value, s.detail, s.truncated) == (pytest.approx(-nll), pytest.approx(nll), False)
    sent = [json.dumps(item, sort_keys=True) for _, item in api.nll_items]
    assert len(sent) == len(set(sent)) == 5                  # the repeated reply scored once
    assert api.max_request_items == 2 and api.nll_requests == 3
    assert scorer.models_used() == ["fake-gpt"] and scorer.detail_name == "nll"


def test_contradiction_scorer_is_one_minus_the_services_probability():
    transport = Recorded(ContractFake(limits={"max_dialogues": 2}))
    jobs = [ReplyCandidates(CONTEXT, REPLIES, "bot", turn_id=2)]
    scorer = ContradictionScorer(mode="structured")
    [row] = score(scorer, jobs, transport)
    dialogues = [[*(t.to_json() for t in CONTEXT), {"id": 2, "speaker": "bot", "text": r}]
                 for r in REPLIES]
    answer = direct(Recorded(ContractFake()), lambda c: c.contradiction(dialogues, mode="structured"))
    assert [s.detail for s in row] == [r.probability for r in answer.results]
    assert [s.value for s in row] == pytest.approx([1 - r.probability for r in answer.results])
    assert row[0].value == pytest.approx(0.1) and row[1].value == pytest.approx(0.9)
    sizes = [len(b["dialogues"]) for b in transport.bodies("/v1/contradiction")]
    assert sorted(sizes) == [1, 2, 2]  # chunks are sent concurrently: in any order
    assert transport.bodies("/v1/contradiction", 413) == []
    assert scorer.models_used() == ["fake-nli"]
    with pytest.raises(ValueError, match="speaker"):
        score(ContradictionScorer(), [ReplyCandidates(CONTEXT, ("x",))], transport)


def test_rerank_scorer_gives_the_rerankers_scores_within_max_candidates():
    transport = Recorded(ContractFake(limits={"max_candidates": 2}))
    jobs = [ReplyCandidates(CONTEXT, REPLIES, "bot"), ReplyCandidates(CONTEXT, REPLIES[:1], None)]
    scorer = RerankScorer(nll_model="fake-gpt")
    got = score(scorer, jobs, transport)
    whole = direct(Recorded(ContractFake()), lambda c: c.rerank(
        [t.to_json() for t in CONTEXT], list(REPLIES), speaker="bot", nll_model="fake-gpt"))
    by_index = {r.index: r for r in whole.results}
    assert [s.value for s in got[0]] == pytest.approx([by_index[i].score for i in range(5)])
    assert [s.detail for s in got[0]] == [by_index[i].contradiction_probability for i in range(5)]
    bodies = transport.bodies("/v1/rerank")
    first = [b["candidates"] for b in bodies if b.get("speaker") == "bot"]
    assert first == [list(REPLIES[:2]), list(REPLIES[2:4]), list(REPLIES[4:])]  # in turn, in order
    assert [b["candidates"] for b in bodies if "speaker" not in b] == [list(REPLIES[:1])]
    assert transport.bodies("/v1/rerank", 413) == []
    assert scorer.models_used() == ["fake-nli", "fake-gpt"] and scorer.detail_name == "contradiction"


def test_unknown_limits_fall_back_to_halving_on_413():
    api = ContractFake(limits={"max_dialogues": 2, "max_candidates": 2})
    jobs = [ReplyCandidates(CONTEXT, REPLIES, "bot", turn_id=2)]
    hidden = Recorded(api, publish_limits=False)
    contradiction = score(ContradictionScorer(chunk_size=512), jobs, hidden)
    rerank = score(RerankScorer(), jobs, hidden)
    known = Recorded(api)
    assert contradiction == score(ContradictionScorer(), jobs, known)
    assert rerank == score(RerankScorer(), jobs, known)
    assert [len(b["dialogues"]) for b in hidden.bodies("/v1/contradiction", 413)] == [5, 3]
    assert max(len(b["dialogues"]) for b in hidden.bodies("/v1/contradiction")) == 2
    assert [len(b["candidates"]) for b in hidden.bodies("/v1/rerank", 413)] == [5, 3]
    assert sum(len(b["candidates"]) for b in hidden.bodies("/v1/rerank")) == 5


def test_make_scorer_checks_the_models():
    assert make_scorer("nll", SERVED, model="fake-gpt", chunk_size=8).chunk_size == 8
    assert make_scorer("contradiction", SERVED, mode="unstructured").mode == "unstructured"
    assert make_scorer("rerank", SERVED, model="fake-nli", nll_model="fake-bart").nll_model == "fake-bart"
    with pytest.raises(ValueError, match="needs a dialogue"):
        make_scorer("nll", SERVED)
    with pytest.raises(ValueError, match="'fake-gpt' is a causal model"):
        make_scorer("contradiction", SERVED, model="fake-gpt")
    with pytest.raises(ValueError, match="--nll-model needs a dialogue"):
        make_scorer("rerank", SERVED, nll_model="fake-nli")
    with pytest.raises(ValueError, match="unknown scorer 'bleu'"):
        make_scorer("bleu", SERVED)


# --- the runners chunk to the published limits ----------------------------------------------------


def _decode_record(cid, texts, evidence):
    return {"record_id": cid, "turns": [{"turn_id": i, "agent_id": i % 2, "text": t}
                                        for i, t in enumerate(texts)],
            "is_contradiction": bool(evidence),
            "aggregated_contradiction_indices": evidence + [len(texts) - 1] if evidence else []}


def test_decode_runner_sends_at_most_the_published_dialogues_per_request(tmp_path):
    from dialscore.evals.runners.decode import arun_decode

    path = tmp_path / "decode.jsonl"
    # Distinct dialogues: identical ones are sent once.
    records = [_decode_record(f"c{i}", ["i have a dog .", f"ok {i} .", "i do not have a dog ."], [0])
               for i in range(3)] + [_decode_record(f"n{i}", ["hi .", f"hey {i} ."], []) for i in range(4)]
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    transport = Recorded(ContractFake(limits={"max_dialogues": 3}))
    run = direct(transport, lambda c: arun_decode(c, path, tmp_path / "out", progress=False))
    bodies = transport.bodies("/v1/contradiction")
    assert max(len(b["dialogues"]) for b in bodies) == 3
    assert transport.bodies("/v1/contradiction", 413) == []
    assert run.metrics["original"]["structured"].n == 7
    assert run.report["config"]["chunk_size"] == 512


def test_mutual_rerank_runner_sends_at_most_the_published_candidates(tmp_path):
    from dialscore.evals.runners.mutual import arun_mutual

    path = tmp_path / "mutual.jsonl"
    path.write_text(json.dumps({"id": "d_1", "answers": "A", "article": "m : i love dogs . f : ok .",
                                "options": ["m : i hate dogs .", "m : a", "m : b", "m : c"]}) + "\n")
    limited, unlimited = Recorded(ContractFake(limits={"max_candidates": 3})), Recorded(ContractFake())
    runs = [direct(t, lambda c: arun_mutual(c, path, "rerank", None, tmp_path / name, progress=False))
            for t, name in ((limited, "a"), (unlimited, "b"))]
    assert runs[0].scores == runs[1].scores
    assert [len(b["candidates"]) for b in limited.bodies("/v1/rerank")] == [3, 1]
    assert [len(b["candidates"]) for b in unlimited.bodies("/v1/rerank")] == [4]
