"""Cohere's POST /v2/rerank and TEI's POST /rerank on the real Serve app, reached with the Cohere
Python SDK (a client nobody here wrote) as well as plain HTTP."""

from __future__ import annotations

import httpx
import pytest

from dialscore_server.rerank.engine.reranker import query_context

pytestmark = pytest.mark.serve

QUERY = "I love dogs.\nDo you have pets?\nI have two dogs.\nWhat are their names?"
DOCUMENTS = ["Rex and Max.", "I hate dogs, I never had any.", "I do not have pets.",
             "They are called Rex and Max, I love them.", "Dogs?", "I have a cat."]
CLASSIFIER = "roberta-large-mnli"
NLL_MODEL = "dialogpt-medium"


def _post(served, path, body):
    with httpx.Client(base_url=served.url, timeout=60) as client:
        return client.post(path, json=body)


@pytest.fixture(scope="module")
def v1_results(served):
    context = [{"id": t.id, "speaker": t.speaker, "text": t.text} for t in query_context(QUERY)]
    r = _post(served, "/v1/rerank", {"model": CLASSIFIER, "context": context, "candidates": DOCUMENTS,
                                     "speaker": "A"})
    assert r.status_code == 200, r.text
    body = r.json()
    # vLLM-style id and usage on dialscore's own shape.
    assert body["id"].startswith("rerank-") and body["usage"] == {"candidates": len(DOCUMENTS), "context_turns": 4}
    # The classifier's revision, as /v1/models lists it (a local checkpoint's: a hash of its files).
    listed = {m["name"]: m for m in httpx.get(f"{served.url}/v1/models", timeout=30).json()["models"]}
    assert body["revision"] == listed[CLASSIFIER]["revision"] and body["revision"].startswith("sha256:")
    return body["results"]


def test_v2_rerank_answers_cohere_shape_in_v1_order(served, v1_results):
    r = _post(served, "/v2/rerank", {"model": CLASSIFIER, "query": QUERY, "documents": DOCUMENTS,
                                     "max_tokens_per_doc": 512})
    assert r.status_code == 200, r.text
    body = r.json()
    assert set(body) == {"id", "results", "meta"} and body["id"]
    assert body["meta"]["billed_units"] == {"search_units": 1}
    assert [x["index"] for x in body["results"]] == [x["index"] for x in v1_results]
    for got, want in zip(body["results"], v1_results):
        assert set(got) == {"index", "relevance_score"}
        assert got["relevance_score"] == pytest.approx(1.0 - want["contradiction_probability"], abs=1e-6)
    # The detector must actually separate the candidates, or the order check proves nothing.
    assert len({round(x["relevance_score"], 6) for x in body["results"]}) > 1
    top = _post(served, "/v2/rerank", {"model": CLASSIFIER, "query": QUERY, "documents": DOCUMENTS, "top_n": 2})
    assert [x["index"] for x in top.json()["results"]] == [x["index"] for x in v1_results[:2]]


def test_cohere_sdk_reranks_through_v2_in_v1_order(served, v1_results):
    import cohere  # the test extra installs it: a failed install fails here, never skips
    client = cohere.ClientV2(api_key="unused", base_url=served.url)
    out = client.rerank(model=CLASSIFIER, query=QUERY, documents=DOCUMENTS, top_n=len(DOCUMENTS))
    assert [x.index for x in out.results] == [x["index"] for x in v1_results]
    assert out.results[0].relevance_score >= out.results[-1].relevance_score
    assert out.meta.billed_units.search_units == 1


def test_tei_rerank_takes_documents_and_ignores_unknown_fields(served, v1_results):
    r = _post(served, "/rerank", {"model": CLASSIFIER, "query": QUERY, "documents": DOCUMENTS,
                                  "truncate": True, "truncation_direction": "Left", "not_a_tei_field": 1})
    assert r.status_code == 200, r.text
    assert [x["index"] for x in r.json()] == [x["index"] for x in v1_results]


@pytest.mark.parametrize("path,body,param", [
    ("/rerank", {"query": "just one line", "texts": ["a", "b"]}, "query"),
    ("/v2/rerank", {"query": "just one line", "documents": ["a", "b"]}, "query"),
    ("/v2/rerank", {"query": " \n ", "documents": ["a"]}, "query"),
    ("/rerank", {"query": QUERY, "texts": ["a"], "raw_scores": True}, "raw_scores"),
    ("/rerank", {"query": QUERY, "texts": ["a"], "truncation_direction": "Right"}, "truncation_direction"),
    ("/v2/rerank", {"query": QUERY, "documents": []}, "documents"),
    ("/v2/rerank", {"query": QUERY, "documents": ["a"], "top_n": 0}, "top_n"),
    # dialscore's own shape: the candidates' speaker never spoke, or nothing came before.
    ("/v1/rerank", {"context": [{"speaker": "B", "text": "hi"}], "candidates": ["a", "b"],
                    "speaker": "A"}, "speaker"),
    ("/v1/rerank", {"context": [{"speaker": "B", "text": "hi"}], "candidates": ["a", "b"]}, "speaker"),
    ("/v1/rerank", {"context": [], "candidates": ["a"], "mode": "unstructured"}, "speaker"),
])
def test_what_cannot_be_ranked_is_a_422_naming_the_field_never_a_tie(served, path, body, param):
    r = _post(served, path, body)
    assert r.status_code == 422, r.text
    assert r.json()["error"]["param"] == param


def test_v2_rerank_unknown_model_is_404(served):
    r = _post(served, "/v2/rerank", {"model": "rerank-v3.5", "query": QUERY, "documents": ["a"]})
    assert r.status_code == 404 and r.json()["error"]["param"] == "model"


def test_v1_rerank_with_nothing_to_contradict_falls_back_to_the_nll_order(served):
    """Named an NLL model, a rerank whose candidates' speaker never spoke is served: every
    contradiction probability is 0.0 and the order is the NLL term's, as /v1/nll scores them."""
    context = [{"speaker": "B", "text": "Do you have pets?"}]
    candidates = ["I have two dogs.", "dogs dogs dogs dogs", "Yes."]
    r = _post(served, "/v1/rerank", {"model": CLASSIFIER, "nll_model": NLL_MODEL, "context": context,
                                     "candidates": candidates, "speaker": "A"})
    assert r.status_code == 200, r.text
    results = r.json()["results"]
    assert r.json()["nll_revision"].startswith("sha256:")
    assert all(x["contradiction_probability"] == 0.0 for x in results)
    nll = _post(served, "/v1/nll", {"model": NLL_MODEL, "items": [
        {"context": ["Do you have pets?"], "target": c} for c in candidates]})
    assert nll.status_code == 200, nll.text
    by_nll = sorted(range(len(candidates)), key=lambda k: nll.json()["results"][k]["nll"])
    assert [x["index"] for x in results] == by_nll
    for x in results:
        assert x["score"] == pytest.approx(-0.1 * nll.json()["results"][x["index"]]["nll"], rel=1e-5)
    # Timing headers (ms, as TEI): the NLL items were tokenized before they were queued.
    assert int(r.headers["x-compute-time"]) >= 0 and int(r.headers["x-queue-time"]) >= 0
    assert int(r.headers["x-tokenization-time"]) >= 0
    assert int(nll.headers["x-tokenization-time"]) >= 0


@pytest.mark.parametrize("path,body", [
    ("/v1/rerank", {"model": CLASSIFIER, "context": [{"speaker": "A", "text": "I love dogs."},
                                                     {"speaker": "B", "text": "Do you?"}],
                    "candidates": DOCUMENTS, "speaker": "A"}),
    ("/rerank", {"model": CLASSIFIER, "query": QUERY, "texts": DOCUMENTS}),
    ("/v2/rerank", {"model": CLASSIFIER, "query": QUERY, "documents": DOCUMENTS}),
])
def test_every_rerank_route_sends_timing_headers_in_milliseconds(served, path, body):
    r = _post(served, path, body)
    assert r.status_code == 200, r.text
    assert int(r.headers["x-compute-time"]) >= 0 and int(r.headers["x-queue-time"]) >= 0
    # The detector tokenizes inside its engine call: no separate tokenization time to report.
    assert "x-tokenization-time" not in r.headers
    revision = r.json()["revision"] if path == "/v1/rerank" else r.headers["x-model-revision"]
    assert revision.startswith("sha256:")
