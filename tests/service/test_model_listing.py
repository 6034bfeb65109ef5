"""GET /v1/models in both shapes on the real Serve app, read by the OpenAI Python SDK (a client
nobody here wrote) and by the dialscore client; timing headers in milliseconds."""

from __future__ import annotations

import httpx
import pytest

pytestmark = pytest.mark.serve

SERVED = {"dialogpt-medium", "bart-base", "untrained-gpt2", "roberta-large-mnli"}


def test_models_listing_has_openai_and_dialscore_shapes(served):
    body = httpx.get(f"{served.url}/v1/models", timeout=30).json()
    assert body["object"] == "list"
    assert {m["id"] for m in body["data"]} == {m["name"] for m in body["models"]} == SERVED
    for m in body["data"]:
        assert m["object"] == "model" and m["owned_by"] == "dialscore" and isinstance(m["created"], int)
    fam = {m["id"]: m["family"] for m in body["data"]}
    assert fam["roberta-large-mnli"] == "classifier" and fam["bart-base"] == "seq2seq"


def test_openai_sdk_lists_the_models(served):
    import openai  # the test extra installs it: a failed install fails here, never skips
    client = openai.OpenAI(api_key="unused", base_url=f"{served.url}/v1")
    models = list(client.models.list())
    assert {m.id for m in models} == SERVED
    assert all(m.object == "model" and m.owned_by == "dialscore" for m in models)


def test_dialscore_client_still_reads_its_cards(served):
    from dialscore.client import DialscoreClient

    with DialscoreClient(served.url) as client:
        assert {m.name for m in client.models()} == SERVED


def test_contradiction_sends_timing_headers_in_milliseconds(served):
    r = httpx.post(f"{served.url}/v1/contradiction", timeout=60, json={
        "dialogues": [{"turns": [{"speaker": "a", "text": "I love dogs."}, {"speaker": "b", "text": "Why?"},
                                 {"speaker": "a", "text": "I hate dogs."}]}]})
    assert r.status_code == 200, r.text
    assert int(r.headers["x-compute-time"]) >= 0 and int(r.headers["x-queue-time"]) >= 0
