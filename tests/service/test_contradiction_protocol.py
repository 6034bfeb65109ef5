"""Schemas of POST /v1/contradiction, POST /v1/rerank and the TEI-shaped POST /rerank."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from dialscore_server.contradiction.engine.pairing import DetectionResult, Evidence, Turn
from dialscore_server.contradiction.protocol import ContradictionRequest, ContradictionResponse
from dialscore_server.contract.errors import ServiceError
from dialscore_server.rerank.engine.reranker import RerankOptions, RerankOutput, RerankResult, RerankWeights
from dialscore_server.rerank.protocol import RerankRequest, RerankResponse, RerankUsage
from dialscore_server.rerank.tei.protocol import TEIRerankRequest
from dialscore_server.contract.limits import Limits


def errors(model, data) -> list[dict]:
    with pytest.raises(ValidationError) as e:
        model.model_validate_json(data) if isinstance(data, str) else model.model_validate(data)
    return e.value.errors()


def test_contradiction_request_to_job_and_defaults():
    req = ContradictionRequest.model_validate_json(
        '{"dialogues": [{"turns": [{"speaker": 0, "text": "a"}, {"id": "x", "speaker": "bob", '
        '"text": "b"}]}], "threshold": 1}')
    job = req.to_job()
    assert job.mode == "structured" and job.threshold == 1.0 and job.evidence_threshold is None
    assert job.dialogues == [[Turn(0, "a", None), Turn("bob", "b", "x")]]


@pytest.mark.parametrize("data,loc", [
    ({"dialogues": []}, ("dialogues",)),
    ({"dialogues": [{"turns": []}]}, ("dialogues", 0, "turns")),
    ({}, ("dialogues",)),
    ({"dialogues": [{"turns": [{"speaker": True, "text": "a"}]}]}, ("dialogues", 0, "turns", 0, "speaker", "int")),
    ({"dialogues": [{"turns": [{"speaker": 1, "text": 5}]}]}, ("dialogues", 0, "turns", 0, "text")),
    ({"dialogues": [{"turns": [{"speaker": 1, "text": "a"}]}], "threshold": "0.5"}, ("threshold",)),
    ({"dialogues": [{"turns": [{"speaker": 1, "text": "a"}]}], "threshold": 1.5}, ("threshold",)),
    ({"dialogues": [{"turns": [{"speaker": 1, "text": "a"}]}], "mode": "fuzzy"}, ("mode",)),
    ({"dialogues": [{"turns": [{"speaker": 1, "text": "a", "who": 2}]}]}, ("dialogues", 0, "turns", 0, "who")),
])
def test_contradiction_request_rejects_bad_input(data, loc):
    assert any(tuple(e["loc"])[:len(loc)] == loc for e in errors(ContradictionRequest, data))


def test_repeated_turn_ids_are_refused_naming_the_field():
    [err] = errors(ContradictionRequest, {"dialogues": [{"turns": [
        {"id": 1, "speaker": "a", "text": "x"}, {"speaker": "b", "text": "y"}]}]})
    assert tuple(err["loc"]) == ("dialogues", 0, "turns") and "turns[1].id" in err["msg"]
    [err] = errors(RerankRequest, {"context": [{"id": "a", "speaker": 1, "text": "x"},
                                               {"id": "a", "speaker": 2, "text": "y"}],
                                   "candidates": ["z"]})
    assert tuple(err["loc"]) == ("context",) and "context[1].id" in err["msg"]


def test_limits_are_payload_too_large_naming_the_field():
    limits = Limits()
    req = RerankRequest.model_validate({"context": [], "candidates": ["c"] * 1000})
    with pytest.raises(ServiceError) as e:
        req.check_limits(limits)
    assert (e.value.type, e.value.status, e.value.param) == ("payload_too_large", 413, "candidates")
    long = "x" * (limits.max_text_chars + 1)
    req = ContradictionRequest.model_validate(
        {"dialogues": [{"turns": [{"speaker": 1, "text": "a"}]}, {"turns": [{"speaker": 1, "text": long}]}]})
    with pytest.raises(ServiceError) as e:
        req.check_limits(limits)
    assert e.value.param == "dialogues[1].turns[0].text"
    tei = TEIRerankRequest.model_validate({"query": "a\nb", "texts": ["t"] * 300})
    with pytest.raises(ServiceError) as e:
        tei.check_limits(limits)
    assert e.value.param == "texts"


def test_rerank_requests_validate():
    assert errors(RerankRequest, {"context": [], "candidates": []})[0]["loc"] == ("candidates",)
    assert errors(RerankRequest, {"context": [], "candidates": ["a"], "top_n": 0})[0]["loc"] == ("top_n",)
    assert errors(RerankRequest, {"context": [], "candidates": ["a"],
                                  "weights": {"nll": -1}})[0]["loc"] == ("weights", "nll")
    req = RerankRequest.model_validate({"context": [{"speaker": "u", "text": "hi"}], "candidates": ["a"],
                                        "weights": {"nll": 0.5}, "nll_model": "dialogpt-medium"})
    options = req.options()
    assert options.weights == RerankWeights(None, 0.5) and options.speaker is None
    # Fields TEI clients send are accepted, unknown ones ignored (as TEI does); what the
    # detector cannot do is refused naming the field.
    tei = TEIRerankRequest.model_validate({"query": "q", "texts": ["a"], "truncate": True,
                                           "truncation_direction": "Left", "raw_scores": False,
                                           "some_future_field": 1})
    assert tei.options() == RerankOptions(speaker="A")
    tei.check_options()
    right = TEIRerankRequest.model_validate({"query": "q", "texts": ["a"], "truncation_direction": "Right"})
    with pytest.raises(ServiceError) as e:
        right.check_options()
    assert e.value.param == "truncation_direction"
    assert TEIRerankRequest.model_validate({"query": "q", "documents": ["a", "b"]}).texts == ["a", "b"]
    assert errors(TEIRerankRequest, {"query": "q", "texts": []})[0]["loc"] == ("texts",)


def test_responses_from_engine_results():
    req = ContradictionRequest.model_validate(
        {"dialogues": [{"turns": [{"speaker": 1, "text": "a"}]}], "threshold": 0.4})
    res = ContradictionResponse.from_engine(
        req, [DetectionResult(True, 0.8, (Evidence(3, 0.8),), 2)], model="m", stand_in=True)
    assert res.model_dump()["results"] == [
        {"is_contradiction": True, "probability": 0.8, "evidence": [{"turn": 3, "probability": 0.8}],
         "num_pairs": 2}]
    assert res.evidence_threshold == 0.4
    out = RerankOutput([RerankResult(1, -0.2, 0.2, False, (), 1.5)], RerankWeights(1.0, 0.1), "bot",
                       "structured")
    body = RerankResponse.from_engine(out, model="m", stand_in=True, nll_model="g",
                                      usage=RerankUsage(candidates=3, context_turns=2)).model_dump(
        exclude_none=True)
    assert body["id"].startswith("rerank-") and body["usage"] == {"candidates": 3, "context_turns": 2}
    assert body["results"] == [{"index": 1, "score": -0.2, "contradiction_probability": 0.2,
                                "is_contradiction": False, "evidence": [], "nll": 1.5}]
    assert body["weights"] == {"contradiction": 1.0, "nll": 0.1} and body["speaker"] == "bot"


@pytest.mark.parametrize("module", ["dialscore_server.contradiction.engine.engine", "dialscore_server.rerank.engine.reranker"])
def test_docstring_examples_run(module):
    import doctest
    import importlib

    result = doctest.testmod(importlib.import_module(module))
    assert result.attempted > 0 and result.failed == 0
