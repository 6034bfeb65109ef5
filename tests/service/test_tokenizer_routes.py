"""GET /tokenizer_info, POST /tokenize and POST /detokenize (vLLM's shapes) on the real Serve app:
the ids are exactly those POST /v1/completions scores for the same text (plain text: special-token
strings read as characters), every answer publishes the model's window (`max_model_len`, also in
GET /v1/models), and bad requests are 4xx naming the field."""

from __future__ import annotations

import httpx
import pytest

pytestmark = pytest.mark.serve

MODEL = "dialogpt-medium"
TEXTS = ["The cat sat on the mat because it was warm.", "Hi <|endoftext|> there\n\n  ok ✓"]


@pytest.fixture(scope="module")
def tok(sharp_stand_ins):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(sharp_stand_ins["gpt2"])


def _post(served, route: str, body: dict) -> httpx.Response:
    return httpx.post(f"{served.url}{route}", json=body, timeout=60)


@pytest.mark.parametrize("text", TEXTS)
def test_tokenize_gives_the_ids_completions_scores(served, tok, text):
    window = served.config(MODEL).max_length
    r = _post(served, "/tokenize", {"model": MODEL, "prompt": text, "add_special_tokens": False})
    assert r.status_code == 200, r.text
    out = r.json()
    ids = tok(text, add_special_tokens=False, split_special_tokens=True).input_ids
    assert out == {"count": len(ids), "max_model_len": window, "tokens": ids}
    # The same numbers whether /v1/completions gets the text or these ids.
    body = {"model": MODEL, "echo": True, "logprobs": 0, "max_tokens": 0}
    as_text = _post(served, "/v1/completions", {**body, "prompt": text}).json()["choices"][0]
    as_ids = _post(served, "/v1/completions", {**body, "prompt": out["tokens"]}).json()["choices"][0]
    # The second request finds the first's prompt in the replica's context cache and recomputes
    # only its tail, in a pass of another shape: equal to float rounding (docs/nll.md).
    text_lp, ids_lp = as_text["logprobs"]["token_logprobs"], as_ids["logprobs"]["token_logprobs"]
    assert text_lp[0] is None and ids_lp[0] is None
    assert ids_lp[1:] == pytest.approx(text_lp[1:], rel=1e-5, abs=1e-5)
    assert len(as_text["logprobs"]["tokens"]) == out["count"]


def test_detokenize_round_trips_and_writes_special_tokens_out(served, tok):
    ids = _post(served, "/tokenize", {"model": MODEL, "prompt": TEXTS[1]}).json()["tokens"]
    r = _post(served, "/detokenize", {"model": MODEL, "tokens": ids})
    assert r.status_code == 200 and r.json() == {"prompt": TEXTS[1]}
    eos = tok.eos_token_id
    r = _post(served, "/detokenize", {"model": MODEL, "tokens": [eos, ids[0]]})
    assert r.json() == {"prompt": tok.eos_token + tok.decode([ids[0]])}


def test_tokenizer_info_and_model_listing_publish_the_window(served, tok):
    window = served.config(MODEL).max_length
    r = httpx.get(f"{served.url}/tokenizer_info", params={"model": MODEL}, timeout=60)
    assert r.status_code == 200, r.text
    info = r.json()
    assert info["model"] == MODEL and info["max_model_len"] == info["model_max_length"] == window
    assert info["eos_token"] == tok.eos_token and info["eos_token_id"] == tok.eos_token_id
    assert info["vocab_size"] >= len(tok) and info["tokenizer_class"]
    listing = httpx.get(f"{served.url}/v1/models", timeout=60).json()["data"]
    windows = {m["id"]: m["max_model_len"] for m in listing}
    for name in (MODEL, "bart-base", "untrained-gpt2"):
        assert windows[name] == served.config(name).max_length


@pytest.mark.parametrize("route, body, status, param", [
    ("/tokenize", {"model": "nope", "prompt": "hi"}, 404, "model"),
    ("/detokenize", {"model": "nope", "tokens": [1]}, 404, "model"),
    ("/tokenize", {"model": "roberta-large-mnli", "prompt": "hi"}, 404, "model"),
    # three dialogue models are served here: which one must be said
    ("/tokenize", {"prompt": "hi"}, 422, "model"),
    ("/detokenize", {"tokens": [1]}, 422, "model"),
    ("/tokenize", {"model": MODEL}, 422, "prompt"),
    ("/tokenize", {"model": MODEL, "prompt": 5}, 422, "prompt"),
    ("/tokenize", {"model": MODEL, "prompt": "hi", "add_special_tokens": True}, 422,
     "add_special_tokens"),
    ("/tokenize", {"model": MODEL, "prompt": "x" * 20_001}, 413, "prompt"),
    ("/detokenize", {"model": MODEL, "tokens": "1 2"}, 422, "tokens"),
    ("/detokenize", {"model": MODEL, "tokens": [5, -1]}, 422, "tokens"),
    ("/detokenize", {"model": MODEL, "tokens": [5, 10 ** 7]}, 422, "tokens"),
    ("/detokenize", {"model": MODEL, "tokens": [5] * 1025}, 413, "tokens"),
])
def test_bad_requests_name_the_field(served, route, body, status, param):
    r = _post(served, route, body)
    assert r.status_code == status, r.text
    assert r.json()["error"]["param"] == param


@pytest.mark.parametrize("params, status", [({"model": "nope"}, 404), ({}, 422)])
def test_tokenizer_info_names_the_model(served, params, status):
    r = httpx.get(f"{served.url}/tokenizer_info", params=params, timeout=60)
    assert r.status_code == status and r.json()["error"]["param"] == "model"
