"""POST /v1/completions on the real Serve app, read by the OpenAI Python SDK (a client nobody here
wrote): prompt log-probs (echo), top-k alternatives and the greedy next token equal the model's
own log-softmax computed directly with transformers on the served checkpoint (the gpt2 stand-in
re-initialised at std 0.3, so log-probs vary by token), and POST /v1/nll's numbers; unsupported
requests are 4xx naming the field."""

from __future__ import annotations

import httpx
import pytest
import torch

pytestmark = pytest.mark.serve

MODEL = "dialogpt-medium"
TOL = 1e-4
TEXTS = ["The cat sat on the mat because it was warm.", "Do you like dogs? I have two of them."]


@pytest.fixture(scope="module")
def hf(sharp_stand_ins):
    """The served checkpoint loaded with plain transformers (float32), and its tokenizer."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = sharp_stand_ins["gpt2"]
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    return model, AutoTokenizer.from_pretrained(path)


@pytest.fixture(scope="module")
def client(served):
    import openai  # the test extra installs it: a failed install fails here, never skips
    return openai.OpenAI(api_key="unused", base_url=f"{served.url}/v1", max_retries=0)


def log_softmax(hf, ids: list[int]) -> torch.Tensor:
    model, _ = hf
    with torch.inference_mode():
        return torch.log_softmax(model(input_ids=torch.tensor([ids])).logits[0].float(), dim=-1)


def _post(served, body: dict) -> httpx.Response:
    return httpx.post(f"{served.url}/v1/completions", json=body, timeout=60)


@pytest.mark.parametrize("max_tokens", [0, 1])
def test_openai_sdk_echo_logprobs_equal_the_models_log_softmax(client, hf, max_tokens):
    _, tok = hf
    out = client.completions.create(model=MODEL, prompt=TEXTS, echo=True, logprobs=3,
                                    max_tokens=max_tokens, temperature=0)
    assert out.object == "text_completion" and out.model == MODEL and out.id
    assert [c.index for c in out.choices] == [0, 1]
    n_prompt = 0
    for text, choice in zip(TEXTS, out.choices):
        ids = tok(text, add_special_tokens=False).input_ids
        n_prompt += len(ids)
        ref = log_softmax(hf, ids)
        lp = choice.logprobs
        assert len(lp.tokens) == len(ids) + max_tokens == len(lp.token_logprobs)
        assert lp.tokens[:len(ids)] == [tok.decode([i]) for i in ids]
        assert lp.token_logprobs[0] is None and lp.top_logprobs[0] is None
        want = ref[torch.arange(len(ids) - 1), torch.tensor(ids[1:])].tolist()
        assert lp.token_logprobs[1:len(ids)] == pytest.approx(want, abs=TOL)
        for j in range(1, len(ids)):
            top = lp.top_logprobs[j]
            values, alt = ref[j - 1].topk(3)
            want_top: dict[str, float] = {}
            for v, a in zip(values.tolist(), alt.tolist()):
                # Two ids can decode to the same string (U+FFFD): the key keeps the best.
                want_top.setdefault(tok.decode([a]), v)
            for key, v in want_top.items():
                assert top[key] == pytest.approx(v, abs=TOL)
            assert top[lp.tokens[j]] == lp.token_logprobs[j]  # the token itself is always there
        assert lp.text_offset == [sum(map(len, lp.tokens[:j])) for j in range(len(lp.tokens))]
        assert choice.finish_reason == "length"
        if max_tokens == 0:
            assert choice.text == text
        else:
            greedy = int(ref[-1].argmax())
            assert lp.tokens[-1] == tok.decode([greedy])
            assert lp.token_logprobs[-1] == pytest.approx(float(ref[-1, greedy]), abs=TOL)
            assert lp.token_logprobs[-1] == max(lp.top_logprobs[-1].values())
            assert choice.text == text + tok.decode([greedy])
    assert out.usage.prompt_tokens == n_prompt
    assert out.usage.completion_tokens == max_tokens * len(TEXTS)
    assert out.usage.total_tokens == n_prompt + max_tokens * len(TEXTS)


def test_openai_sdk_token_id_prompts_and_greedy_token_without_echo(client, hf):
    _, tok = hf
    prompts = [tok(t, add_special_tokens=False).input_ids for t in TEXTS]
    out = client.completions.create(model=MODEL, prompt=prompts, max_tokens=1, logprobs=2,
                                    temperature=0)
    for ids, choice in zip(prompts, out.choices):
        ref = log_softmax(hf, ids)
        greedy = int(ref[-1].argmax())
        assert choice.text == tok.decode([greedy])  # no echo: the new token only
        assert choice.logprobs.tokens == [tok.decode([greedy])]
        assert choice.logprobs.token_logprobs == pytest.approx([float(ref[-1, greedy])], abs=TOL)
        assert choice.logprobs.text_offset == [0]
        assert len(choice.logprobs.top_logprobs[0]) == 2
    # One list of ids is one prompt, not a batch of one-token prompts.
    single = client.completions.create(model=MODEL, prompt=prompts[0], max_tokens=0, echo=True,
                                       logprobs=0)
    assert len(single.choices) == 1 and single.usage.prompt_tokens == len(prompts[0])
    assert single.choices[0].text == tok.decode(prompts[0])
    assert all(len(t) == 1 for t in single.choices[0].logprobs.top_logprobs[1:])  # logprobs 0


def test_echo_logprobs_equal_v1_nll(served, hf):
    """The same numbers as POST /v1/nll's token NLLs for a raw source and target whose tokens
    are the prompt's (the eos appended by /v1/nll is the placeholder slot, not compared)."""
    _, tok = hf
    source, target = "Do you like dogs?", " I have two of them."
    prompt_ids = tok(source, add_special_tokens=False).input_ids + tok(
        target, add_special_tokens=False).input_ids
    nll = httpx.post(f"{served.url}/v1/nll", timeout=60, json={
        "model": MODEL, "items": [{"source": source, "target": target}], "return_tokens": True})
    assert nll.status_code == 200, nll.text
    token_nlls = nll.json()["results"][0]["token_nlls"]
    r = _post(served, {"model": MODEL, "prompt": prompt_ids, "echo": True, "max_tokens": 0,
                       "logprobs": 1})
    assert r.status_code == 200, r.text
    n_src = len(tok(source, add_special_tokens=False).input_ids)
    got = r.json()["choices"][0]["logprobs"]["token_logprobs"][n_src:]
    assert got == pytest.approx([-x for x in token_nlls[:len(got)]], abs=TOL)
    assert len(got) == len(token_nlls) - 1  # /v1/nll also scores the appended eos


def test_response_headers_and_openapi(served):
    r = _post(served, {"model": MODEL, "prompt": "Hello there", "echo": True, "max_tokens": 0,
                       "logprobs": 1})
    assert r.status_code == 200, r.text
    for h in ("x-compute-time", "x-queue-time", "x-tokenization-time"):
        assert int(r.headers[h]) >= 0
    spec = httpx.get(f"{served.url}/openapi.json", timeout=30).json()
    route = spec["paths"]["/v1/completions"]["post"]
    assert {"max_request_tokens", "max_item_tokens"} <= set(route["x-limits"])
    assert "max_request_tokens" in route["description"]


@pytest.mark.parametrize("body, status, param", [
    ({"model": "bart-base", "prompt": "hi there", "max_tokens": 0, "echo": True}, 422, "model"),
    ({"prompt": "hi there", "max_tokens": 0, "echo": True, "logprobs": 21}, 422, "logprobs"),
    ({"prompt": "hi there", "max_tokens": 2}, 422, "max_tokens"),
    ({"prompt": "hi there"}, 422, "max_tokens"),  # OpenAI's default 16
    ({"prompt": "hi there", "max_tokens": 0}, 422, "max_tokens"),  # no echo: nothing to return
    ({"prompt": "hi there", "max_tokens": 1, "stream": True}, 422, "stream"),
    ({"prompt": "hi there", "max_tokens": 1, "n": 2}, 422, "n"),
    ({"prompt": "hi there", "max_tokens": 1, "best_of": 3}, 422, "best_of"),
    ({"prompt": "hi there", "max_tokens": 1, "temperature": 0.7}, 422, "temperature"),
    ({"prompt": "hi there", "max_tokens": 1, "top_p": 0.5}, 422, "top_p"),
    ({"prompt": "hi there", "max_tokens": 1, "stop": ["\n"]}, 422, "stop"),
    ({"prompt": [], "max_tokens": 1}, 422, "prompt"),
    ({"prompt": [[1, 2], [10 ** 7]], "max_tokens": 1}, 422, "prompt[1]"),
    ({"prompt": ["ok", ""], "max_tokens": 1}, 422, "prompt[1]"),
    ({"prompt": [[5, 6], []], "max_tokens": 1}, 422, "prompt[1]"),
    ({"prompt": "", "max_tokens": 1}, 422, "prompt"),
    ({"prompt": [-1, 5], "max_tokens": 1}, 422, "prompt"),
    ({"model": "nope", "prompt": "hi", "max_tokens": 1}, 404, "model"),
])
def test_unsupported_requests_name_the_field(served, body, status, param):
    r = _post(served, {"model": MODEL, **body})
    assert r.status_code == status, r.text
    assert r.json()["error"]["param"] == param


def test_prompt_over_the_window_is_refused_not_truncated(served):
    window = served.config(MODEL).max_length
    ok = _post(served, {"model": MODEL, "prompt": [5] * window, "max_tokens": 0, "echo": True})
    assert ok.status_code == 200, ok.text
    assert ok.json()["usage"]["prompt_tokens"] == window
    r = _post(served, {"model": MODEL, "prompt": [5] * window, "max_tokens": 1})
    assert r.status_code == 422 and r.json()["error"]["param"] == "prompt"
    assert "window" in r.json()["error"]["message"]
    limits = served.args.limits
    r = _post(served, {"model": MODEL, "prompt": [5] * (limits.max_item_tokens + 1), "max_tokens": 0,
                       "echo": True})
    assert r.status_code in (413, 422) and r.json()["error"]["param"] == "prompt"


def test_unknown_fields_are_ignored_and_sampling_fields_allowed_without_generation(served):
    r = _post(served, {"model": MODEL, "prompt": "hi there", "max_tokens": 0, "echo": True,
                       "temperature": 0.9, "seed": 3, "user": "u", "some_vllm_extension": {"a": 1}})
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["logprobs"] is None  # logprobs not asked for
    assert r.json()["choices"][0]["text"] == "hi there"


def test_one_token_prompt_has_only_the_null_log_prob(served):
    r = _post(served, {"model": MODEL, "prompt": [[5], [5, 6]], "echo": True, "max_tokens": 0,
                       "logprobs": 1})
    assert r.status_code == 200, r.text
    first, second = (c["logprobs"] for c in r.json()["choices"])
    assert first["token_logprobs"] == [None] and first["top_logprobs"] == [None]
    assert second["token_logprobs"][0] is None and isinstance(second["token_logprobs"][1], float)
    r = _post(served, {"model": MODEL, "prompt": [5], "max_tokens": 1, "logprobs": 1})
    assert r.status_code == 200, r.text
    assert len(r.json()["choices"][0]["logprobs"]["tokens"]) == 1


def test_auth_guards_completions_like_every_route():
    """With a token set, the route is refused without it and reached with it (the in-process
    gateway app; the request fails validation after auth, so no model is needed)."""
    import asyncio

    from fake_api import FakeAPI

    app = FakeAPI(token="s3cret").app
    body = {"model": MODEL, "prompt": "hi", "max_tokens": 2}

    async def post(headers):
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
            return await c.post("/v1/completions", json=body, headers=headers)

    denied = asyncio.run(post({}))
    assert denied.status_code == 401 and denied.json()["error"]["type"] == "unauthorized"
    allowed = asyncio.run(post({"Authorization": "Bearer s3cret"}))
    assert allowed.status_code == 422 and allowed.json()["error"]["param"] == "max_tokens"
