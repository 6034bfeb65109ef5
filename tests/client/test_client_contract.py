"""The client agrees with the server's published contract: the live app's OpenAPI document and
recorded exchanges in tests/contract/ (no server needed; tests/service/test_contract_snapshot.py
keeps them true to the live app)."""

from __future__ import annotations

import inspect
import json

import httpx
import jsonschema
import pytest

from contract_fake import ContractFake, contract, error, recorded_cards
from dialscore import errors
from dialscore.client import AsyncDialscoreClient, DialscoreClient, RetryPolicy
from dialscore.model_card import ModelCard
from dialscore.probes.data import Dialogue
from dialscore.probes.plan import format_choices, plan_probes

DOCUMENT = contract().document
EXCHANGES = contract().exchanges


def validate(schema: str, value: object) -> None:
    """Raise jsonschema's ValidationError unless `value` is a valid document schema `schema`."""
    jsonschema.Draft202012Validator({"$ref": f"#/components/schemas/{schema}",
                                     "components": DOCUMENT["components"]}).validate(value)


def test_every_server_error_type_has_a_client_class_with_the_same_status():
    """Each type of the document's closed set, with the status and headers recorded for it: the
    client's class for it, and retries exactly where the contract says to come back (a
    Retry-After, or the gateway's word that it dropped the work)."""
    types = DOCUMENT["components"]["schemas"]["ErrorDetail"]["properties"]["type"]["enum"]
    for type_ in types:
        status, headers = contract().errors[type_]
        cls = errors.error_class(status, type_)
        assert cls.error_type == type_, type_
        assert errors.error_class(status, None) in (cls, errors.NotFoundError)   # status fallback
        retryable = "retry-after" in headers or headers.get("x-work-dropped") == "true"
        retried = RetryPolicy().retries(error(status, type_, "x"))
        assert retried == retryable, type_
        assert cls.retryable == retryable, type_


@pytest.mark.parametrize("name", [e["name"] for e in EXCHANGES
                                  if e["source"] == "live" and "call" in e
                                  and e["request"]["method"] == "POST"])
def test_the_client_reads_every_recorded_answer(name):
    """The client call behind each recorded request sends exactly that request, and reads its
    recorded answer: a result of the recorded model, or the error class of the recorded type
    with the recorded param, sent once."""
    exchange = next(e for e in EXCHANGES if e["name"] == name)
    fake = ContractFake()
    spec, recorded = exchange["call"], exchange["response"]
    with DialscoreClient("http://fake", transport=fake.transport(),
                         retry=RetryPolicy(max_attempts=1)) as client:
        method = getattr(client, spec["method"])
        if recorded["status"] < 400:
            out = method(*spec["args"], **spec["kwargs"])
            assert out.model == recorded["body"]["model"]
        else:
            with pytest.raises(errors.APIStatusError) as info:
                method(*spec["args"], **spec["kwargs"])
            err = recorded["body"]["error"]
            assert type(info.value) is errors.error_class(recorded["status"], err["type"])
            assert (info.value.status_code, info.value.param, info.value.attempts) == (
                recorded["status"], err["param"], 1)
    assert fake.replayed == [name]


def test_probe_items_validate_against_the_servers_request_schema():
    d = Dialogue.model_validate({
        "id": "x", "dataset": "DailyDialog", "history": [], "response": "Sure.",
        "explanations": [{"dimension": "event", "antecedent": "Asking nicely", "connective": "causes/enables",
                          "consequent": "a yes", "valid": True}]})
    infos = [c for c in recorded_cards() if c.family != "classifier"]
    plan = plan_probes([d], infos, ["inference", "attribution"], seed=0)
    fake = ContractFake(infos)
    sent: list[dict] = []

    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        validate("NLLRequest", body)
        sent.append(body)
        return fake.handle(request)

    client = DialscoreClient("http://x", transport=httpx.MockTransport(handler))
    for info in infos:
        items = [i.payload() for i in plan.items_of(info.name)]
        out = client.nll_many(info.name, items, chunk_size=5)
        assert len(out) == len(items) and all(isinstance(r.nll, float) for r in out)
    assert len(sent) >= len(infos)


def test_the_live_apps_model_cards_parse_and_give_the_format_choices():
    listing = next(e for e in EXCHANGES if e["name"] == "models")["response"]["body"]["models"]
    dialogue = [raw for raw in listing if raw["family"] != "classifier"]
    assert dialogue
    for raw in dialogue:
        choices = format_choices(ModelCard.model_validate(raw))
        assert choices["why_turn"] == raw["format"]["why_turn"]
        assert choices["explanation_placement"] == raw["format"]["knowledge_position"]
        assert choices["reported_by_server"]


def test_rerank_keywords_cover_the_servers_request_fields_and_validate():
    """Every optional field of the document's RerankRequest is a keyword of ``rerank`` (no
    ``extra_body`` needed), and a body built from all of them validates against the schema."""
    options = set(DOCUMENT["components"]["schemas"]["RerankRequest"]["properties"]) - {
        "context", "candidates"}
    for cls in (DialscoreClient, AsyncDialscoreClient):
        assert options <= set(inspect.signature(cls.rerank).parameters), cls
    sent: list[dict] = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(json.loads(request.content))
        return httpx.Response(200, json={"results": []})

    client = DialscoreClient("http://test", transport=httpx.MockTransport(handler))
    client.rerank([{"speaker": "A", "text": "I have a dog."}, {"speaker": "B", "text": "Nice."}],
                  ["I have no pets."], top_n=1, nll_model="m", weights={"contradiction": 2.0},
                  speaker="A", mode="unstructured", model="nli", threshold=0.6,
                  evidence_threshold=0.4, priority=1)
    body = sent[0]
    assert set(body) == options | {"context", "candidates"}
    validate("RerankRequest", body)
    assert (body["speaker"], body["mode"], body["model"], body["threshold"]) == ("A", "unstructured", "nli", 0.6)
    client.rerank([{"speaker": "A", "text": "hi"}], ["a"])
    assert set(sent[1]) == {"context", "candidates"}  # unset options take the server's defaults
