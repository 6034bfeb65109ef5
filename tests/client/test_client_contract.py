"""The client agrees with the server's own schemas and error contract (no server needed)."""

from __future__ import annotations

import typing

import httpx

from dialscore import errors
from dialscore.client import DialscoreClient, RetryPolicy
from dialscore.probes.data import Dialogue
from dialscore.probes.run import format_choices, plan_probes
from dialscore.model_card import ModelCard
from dialscore_server.contract import errors as server_errors
from dialscore_server.nll import protocol
from fake_api import error
from dialscore_server.checkpoints.registry import PAPER_MODELS


def models_entry(config) -> dict:
    """What GET /v1/models is documented to return for a registry entry, format included."""
    return {"name": config.name, "family": config.family, "source": config.source,
            "revision": config.revision, "max_length": config.max_length, "dtype": config.dtype,
            "device": config.device, "stand_in": config.stand_in,
            "format": config.format.model_dump(mode="json")}


def test_every_server_error_type_has_a_client_class_with_the_same_status():
    for type_ in typing.get_args(server_errors.ErrorType):
        status = server_errors.STATUS[type_]
        cls = errors.error_class(status, type_)
        assert cls.error_type == type_, type_
        assert errors.error_class(status, None) in (cls, errors.NotFoundError)   # status fallback
        retried = RetryPolicy().retries(error(status, type_, "x"))
        assert retried == (type_ in server_errors.RETRYABLE), type_
        assert cls.retryable == (type_ in server_errors.RETRYABLE), type_


def test_probe_items_validate_against_the_servers_request_schema():
    d = Dialogue.model_validate({
        "id": "x", "dataset": "DailyDialog", "history": [], "response": "Sure.",
        "explanations": [{"dimension": "event", "antecedent": "Asking nicely", "connective": "causes/enables",
                          "consequent": "a yes", "valid": True}]})
    infos = [ModelCard.model_validate(models_entry(c)) for c in PAPER_MODELS if c.family != "classifier"]
    plan = plan_probes([d], infos, ["inference", "attribution"], seed=0)
    sent: list[dict] = []

    def handler(request: httpx.Request) -> httpx.Response:
        body = protocol.NLLRequest.model_validate_json(request.content)   # strict, extra=forbid
        sent.append(body.model_dump())
        response = protocol.NLLResponse(
            model=body.model, source="s", revision=None, stand_in=False, append_eos=True,
            results=[protocol.NLLResultOut(nll=1.0, num_tokens=2, truncated=False) for _ in body.items],
            usage=protocol.Usage(source_tokens=1, target_tokens=2))
        return httpx.Response(200, json=response.model_dump(mode="json"))

    client = DialscoreClient("http://x", transport=httpx.MockTransport(handler))
    for info in infos:
        items = [i.payload() for i in plan.items_of(info.name)]
        out = client.nll_many(info.name, items, chunk_size=5)
        assert len(out) == len(items) and all(isinstance(r.nll, float) for r in out)
    assert len(sent) >= len(infos)


def test_models_entries_from_the_registry_parse_and_give_the_format_choices():
    for config in PAPER_MODELS:
        info = ModelCard.model_validate(models_entry(config))
        choices = format_choices(info)
        assert choices["why_turn"] == config.format.why_turn
        assert choices["explanation_placement"] == config.format.knowledge_position
        assert choices["reported_by_server"]


def test_rerank_keywords_cover_the_servers_request_fields_and_validate():
    """Every optional field of the server's RerankRequest is a keyword of ``rerank`` (no
    ``extra_body`` needed), and a body built from all of them validates against the schema."""
    import inspect

    from dialscore.client import AsyncDialscoreClient
    from dialscore_server.rerank.protocol import RerankRequest

    options = set(RerankRequest.model_fields) - {"context", "candidates"}
    for cls in (DialscoreClient, AsyncDialscoreClient):
        assert options <= set(inspect.signature(cls.rerank).parameters), cls
    sent: list[dict] = []

    def handler(request: httpx.Request) -> httpx.Response:
        import json

        sent.append(json.loads(request.content))
        return httpx.Response(200, json={"results": []})

    client = DialscoreClient("http://test", transport=httpx.MockTransport(handler))
    client.rerank([{"speaker": "A", "text": "I have a dog."}, {"speaker": "B", "text": "Nice."}],
                  ["I have no pets."], top_n=1, nll_model="m", weights={"contradiction": 2.0},
                  speaker="A", mode="unstructured", model="nli", threshold=0.6,
                  evidence_threshold=0.4)
    body = sent[0]
    assert set(body) == options | {"context", "candidates"}
    request = RerankRequest.model_validate(body)
    assert (request.speaker, request.mode, request.model, request.threshold) == ("A", "unstructured", "nli", 0.6)
    client.rerank([{"speaker": "A", "text": "hi"}], ["a"])
    assert set(sent[1]) == {"context", "candidates"}  # unset options take the server's defaults
