"""The contract snapshot and the fake built on it (tests/client/contract_fake.py): the snapshot
covers every route and error the client handles, the fake answers the recorded requests as the
live app did when it computes them itself, checks requests as the gateway does, and refuses to
give a response the document does not allow."""

from __future__ import annotations

import httpx
import pytest

from contract_fake import ContractFake, ContractViolation, contract, recorded_cards
from contract_snapshot import differences
from dialscore import errors
from dialscore.client import DialscoreClient

DOCUMENT = contract().document
EXCHANGES = contract().exchanges
#: Routes the fake answers only with what was recorded.
REPLAY_ONLY = {"/v1/completions", "/rerank", "/v2/rerank", "/metrics", "/tokenize", "/detokenize",
               "/tokenizer_info"}


def test_the_snapshot_covers_every_route_and_the_errors_the_client_handles():
    recorded = {(e["request"]["method"].lower(), e["request"]["path"]) for e in EXCHANGES}
    for path, item in DOCUMENT["paths"].items():
        for method in item:
            assert (method, path) in recorded, f"no recorded exchange for {method.upper()} {path}"
    types = DOCUMENT["components"]["schemas"]["ErrorDetail"]["properties"]["type"]["enum"]
    assert set(types) <= set(contract().errors)
    too_large = {e["response"]["body"]["error"]["param"] for e in EXCHANGES
                 if e["response"]["status"] == 413}
    assert {"items", "dialogues", "candidates", "body"} <= too_large   # the request as a whole
    assert "items[0].context" in too_large                              # one element
    headers = {e["name"]: e["response"]["headers"] for e in EXCHANGES}
    assert headers["overloaded"]["retry-after"] and headers["model-error"]["retry-after"]
    assert headers["timeout"]["x-work-dropped"] == "true"
    assert contract().errors["invalid_request"][0] == 422


def _send(fake: ContractFake, exchange: dict) -> httpx.Response:
    """The fake's answer to a recorded request, sent as recorded."""
    request = exchange["request"]
    kwargs = ({"content": request["content"], "headers": {"content-type": "application/json"}}
              if "content" in request else {"json": request["body"]})
    with httpx.Client(transport=fake.transport(), base_url="http://fake") as client:
        return client.request(request["method"], request["path"], **kwargs)


@pytest.mark.parametrize("name", [e["name"] for e in EXCHANGES if e["source"] == "live"
                                  and e["request"]["path"].split("?")[0] not in REPLAY_ONLY])
def test_the_fake_computes_what_the_live_app_answered(name):
    """Without replay, over the live app's models: the same status and error type and param, or
    a body of the same shape (keys, array lengths and JSON types, but at the volatile paths)."""
    exchange = next(e for e in EXCHANGES if e["name"] == name)
    recorded = exchange["response"]
    response = _send(ContractFake(recorded_cards(), replay=False), exchange)
    assert response.status_code == recorded["status"]
    assert response.headers.get("x-error-type") == recorded["headers"].get("x-error-type")
    body = response.json()
    if recorded["status"] >= 400:
        err = recorded["body"]["error"]
        assert (body["error"]["type"], body["error"]["param"]) == (err["type"], err["param"])
    else:
        assert list(differences(recorded["body"], body, set(exchange["volatile"]),
                                values=False)) == []


@pytest.mark.parametrize("item,limits,status,param", [
    ({"context": "hi", "target": "x"}, None, 422, "items[0].context"),          # a type
    ({"context": [], "target": "x", "extra": 1}, None, 422, "items[0].extra"),  # an unknown field
    ({"context": []}, None, 422, "items[0].target"),                            # a missing field
    ({"context": [], "target": "six ch"}, {"max_text_chars": 5}, 413, "items[0].target"),
    ({"context": ["a", "b", "c"], "target": "x"}, {"max_turns": 2}, 413, "items[0].context"),
    ({"context": ["a", "b", "c"], "target": "x"}, {"max_text_chars": 5}, 200, None),
])
def test_the_fake_checks_requests_against_the_schema_and_the_limits(item, limits, status, param):
    fake = ContractFake(limits=limits)
    with DialscoreClient("http://fake", transport=fake.transport()) as client:
        if status == 200:
            assert len(client.nll("fake-gpt", [item]).results) == 1
            return
        with pytest.raises(errors.APIStatusError) as info:
            client.nll("fake-gpt", [item])
    assert (info.value.status_code, info.value.param) == (status, param)
    assert fake.nll_items == []


def test_the_fake_refuses_a_response_the_contract_does_not_allow():
    fake = ContractFake(scorer=lambda model, item: "low")   # NLLResultOut.nll is a number
    with DialscoreClient("http://fake", transport=fake.transport()) as client:
        with pytest.raises(ContractViolation, match=r"does not validate at results\[0\]\.nll"):
            client.nll("fake-gpt", [{"context": [], "target": "x"}])
    with httpx.Client(transport=fake.transport(), base_url="http://fake") as http:
        with pytest.raises(ContractViolation, match="defines no such operation"):
            http.get("/v1/nll")


def test_unknown_limits_are_refused_by_name():
    with pytest.raises(ValueError, match="max_itmes"):
        ContractFake(limits={"max_itmes": 3})
