"""POST /v1/contradiction, /v1/rerank and the TEI-shaped /rerank on the real Serve app."""

from __future__ import annotations

import httpx
import pytest

from dialscore.evals.decode import read_decode
from dialscore_server.rerank.engine.reranker import query_context
from shared_data import shared_file

pytestmark = pytest.mark.serve

DIALOGUES = [
    {"turns": [{"speaker": "bot", "text": "I love dogs."}, {"speaker": "user", "text": "Me too!"},
               {"speaker": "bot", "text": "I have never liked dogs."}]},
    {"turns": [{"speaker": 1, "text": "Hello."}]},
    {"turns": [{"id": "a", "speaker": "x", "text": "I live in Paris."},
               {"id": "b", "speaker": "x", "text": "I moved to Rome last year."},
               {"id": "c", "speaker": "y", "text": "Nice."},
               {"id": "d", "speaker": "x", "text": "I have always lived in Paris."}]},
    {"turns": [{"speaker": 0, "text": "I am a vegetarian."}, {"speaker": 1, "text": "Cool."},
               {"speaker": 0, "text": "Steak is my favourite food."},
               {"speaker": 1, "text": "Really?"}, {"speaker": 0, "text": "Yes, I eat it every day."}]},
]


def _post(served, path, body):
    return httpx.post(f"{served.url}{path}", json=body, timeout=120)


def test_batched_detection_equals_one_dialogue_at_a_time(served):
    together = _post(served, "/v1/contradiction", {"dialogues": DIALOGUES, "evidence_threshold": 0.0})
    assert together.status_code == 200, together.text
    body = together.json()
    assert body["model"] == "roberta-large-mnli" and body["stand_in"] is True
    assert len(body["results"]) == len(DIALOGUES)
    for dialogue, got in zip(DIALOGUES, body["results"]):
        alone = _post(served, "/v1/contradiction", {"dialogues": [dialogue], "evidence_threshold": 0.0})
        want = alone.json()["results"][0]
        assert got["probability"] == pytest.approx(want["probability"], abs=1e-5)
        assert got["is_contradiction"] == want["is_contradiction"]
        assert [e["turn"] for e in got["evidence"]] == [e["turn"] for e in want["evidence"]]
    # One utterance: valid, never a contradiction. Evidence names turn ids, only the last speaker's.
    single = body["results"][1]
    assert (single["is_contradiction"], single["probability"], single["evidence"]) == (False, 0.0, [])
    assert {e["turn"] for e in body["results"][2]["evidence"]} <= {"a", "b"}
    assert {e["turn"] for e in body["results"][0]["evidence"]} <= {0}


def test_rerank_is_sorted_by_score_and_tei_route_agrees(served):
    query = "I love dogs.\nDo you have pets?\nI have two dogs.\nWhat are their names?"
    candidates = ["Rex and Max.", "I hate dogs, I never had any.", "I do not have pets.",
                  "They are called Rex and Max, I love them.", "Dogs?", "I have a cat."]
    context = [{"id": t.id, "speaker": t.speaker, "text": t.text} for t in query_context(query)]
    v1 = _post(served, "/v1/rerank", {"context": context, "candidates": candidates, "speaker": "A"})
    assert v1.status_code == 200, v1.text
    results = v1.json()["results"]
    scores = [r["score"] for r in results]
    assert scores == sorted(scores, reverse=True)
    assert sorted(r["index"] for r in results) == list(range(len(candidates)))
    for r in results:
        assert r["score"] == pytest.approx(-r["contradiction_probability"])
    tei = _post(served, "/rerank", {"query": query, "texts": candidates})
    assert tei.status_code == 200, tei.text
    assert [r["index"] for r in tei.json()] == [r["index"] for r in results]
    top = _post(served, "/v1/rerank", {"context": context, "candidates": candidates, "speaker": "A", "top_n": 2})
    assert [r["index"] for r in top.json()["results"]] == [r["index"] for r in results[:2]]


def test_rerank_with_an_nll_model_adds_its_nll(served):
    context = [{"speaker": "u", "text": "How was your day?"}, {"speaker": "b", "text": "Great."},
               {"speaker": "u", "text": "What did you do?"}]
    candidates = ["I went hiking.", "Nothing at all, I stayed in."]
    r = _post(served, "/v1/rerank", {"context": context, "candidates": candidates,
                                     "nll_model": "dialogpt-medium", "weights": {"contradiction": 1, "nll": 0.5}})
    assert r.status_code == 200, r.text
    body = r.json()
    nll = httpx.post(f"{served.url}/v1/nll", json={"model": "dialogpt-medium", "items": [
        {"context": [t["text"] for t in context], "target": c} for c in candidates]}).json()["results"]
    for res in body["results"]:
        assert res["nll"] == pytest.approx(nll[res["index"]]["nll"], abs=1e-4)
        assert res["score"] == pytest.approx(-(res["contradiction_probability"] + 0.5 * res["nll"]), abs=1e-6)
    assert body["nll_stand_in"] is True


@pytest.mark.parametrize("path,body,status,param", [
    ("/v1/contradiction", {"dialogues": [{"turns": []}]}, 422, "dialogues[0].turns"),
    ("/v1/contradiction", {"dialogues": []}, 422, "dialogues"),
    ("/v1/contradiction", {"dialogues": [{"turns": [{"speaker": "a", "text": 5}]}]}, 422,
     "dialogues[0].turns[0].text"),
    ("/v1/contradiction", {"model": "nope", "dialogues": DIALOGUES}, 404, "model"),
    ("/v1/contradiction", {"model": "dialogpt-medium", "dialogues": DIALOGUES}, 404, "model"),
    ("/v1/contradiction", {"dialogues": DIALOGUES, "threshold": 2}, 422, "threshold"),
    ("/v1/rerank", {"context": [], "candidates": []}, 422, "candidates"),
    ("/v1/rerank", {"context": [], "candidates": ["x"] * 1000}, 413, "candidates"),
    ("/v1/rerank", {"context": "hi", "candidates": ["x"]}, 422, "context"),
    ("/v1/rerank", {"context": [], "candidates": ["x"], "nll_model": "roberta-large-mnli"}, 404, "nll_model"),
    ("/v1/rerank", {"context": [], "candidates": ["x"], "model": "nope"}, 404, "model"),
    ("/rerank", {"query": "hi", "texts": []}, 422, "texts"),
])
def test_bad_input_gets_its_documented_error(served, path, body, status, param):
    r = _post(served, path, body)
    assert r.status_code == status, r.text
    assert r.json()["error"]["param"] == param


def test_the_decode_rct_file_passes_without_a_single_error(served):
    path = shared_file("data/decode/rct.jsonl")
    examples = list(read_decode(path))
    assert len(examples) == 2011
    probabilities = []
    for start in range(0, len(examples), 500):
        chunk = [e.to_request() for e in examples[start:start + 500]]
        r = _post(served, "/v1/contradiction", {"dialogues": chunk})
        assert r.status_code == 200, r.text[:500]
        results = r.json()["results"]
        assert len(results) == len(chunk)
        probabilities += [res["probability"] for res in results]
    # Results are in order: the same dialogues reversed give the same probabilities reversed.
    head = [e.to_request() for e in examples[:50]]
    back = _post(served, "/v1/contradiction", {"dialogues": head[::-1]}).json()["results"]
    assert [r["probability"] for r in back][::-1] == pytest.approx(probabilities[:50], abs=1e-5)
