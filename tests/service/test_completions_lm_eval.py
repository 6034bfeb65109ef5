"""lm-evaluation-harness, unmodified, against POST /v1/completions on the real Serve app: its
`local-completions` model (LocalCompletionsAPI: echo, logprobs 1, max_tokens 1, the answer sliced
``[ctxlen:-1]``, is_greedy from ``top_logprobs``), with token-id and with text prompts, reports the
same log-likelihoods and is_greedy flags as lm-eval's own `hf` model (HFLM) on the served
checkpoint folder (the gpt2 stand-in re-initialised at std 0.3), whether it tokenizes with the
checkpoint's tokenizer or with the service's (its remote tokenizer: GET /tokenizer_info, POST
/tokenize, /detokenize, found by itself). Contexts longer than the window give the same numbers
as HFLM with ``max_length`` two less than the one lm-eval's API model is given (docs/ecosystem.md);
without ``max_length`` lm-eval assumes 2048 and the service refuses the prompt (422 naming it)."""

from __future__ import annotations

import pytest
import requests as http
import torch

from serve_apps import ONE_THREAD, app_args, deploy_app

pytestmark = pytest.mark.serve

MODEL = "dialogpt-medium"
TOL = 1e-4
#: The window of the one-model app (`one_model`): small, so a context can exceed it.
WINDOW = 64
PAIRS = [
    ("The cat sat on the mat", " because it was warm."),
    ("Question: do you like dogs?\nAnswer:", " Yes, I have two of them."),
    ("I found a buyer for the house", " causes I am so happy"),
    ("Hello", " world"),
]


@pytest.fixture(scope="module")
def requests(sharp_stand_ins):
    """PAIRS plus two whose continuation is the model's own greedy token(s), so that is_greedy
    is True for some request and a wrong greedy test would show."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from lm_eval.api.instance import Instance

    path = sharp_stand_ins["gpt2"]
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    tok = AutoTokenizer.from_pretrained(path)
    pairs = list(PAIRS)
    for ctx, steps in (("The weather today is", 1), ("My favourite food is", 2)):
        ids = tok(ctx, add_special_tokens=False).input_ids
        new: list[int] = []
        with torch.inference_mode():
            for _ in range(steps):
                new.append(int(model(input_ids=torch.tensor([ids + new])).logits[0, -1].argmax()))
        pairs.append((ctx, tok.decode(new)))
    return [Instance(request_type="loglikelihood", doc={}, arguments=pair, idx=i)
            for i, pair in enumerate(pairs)]


@pytest.fixture(scope="module")
def hflm_answers(sharp_stand_ins, requests):
    from lm_eval.models.huggingface import HFLM

    lm = HFLM(pretrained=str(sharp_stand_ins["gpt2"]), backend="causal", device="cpu",
              dtype="float32", batch_size=4)
    return lm.loglikelihood(requests)


@pytest.mark.parametrize("tokenized_requests", [True, False])
def test_local_completions_matches_hflm(served, sharp_stand_ins, requests, hflm_answers,
                                        tokenized_requests):
    from lm_eval.models.openai_completions import LocalCompletionsAPI

    api = LocalCompletionsAPI(
        base_url=f"{served.url}/v1/completions", model=MODEL, tokenizer=str(sharp_stand_ins["gpt2"]),
        tokenizer_backend="huggingface", tokenized_requests=tokenized_requests, batch_size=3,
        max_retries=1, max_length=served.config(MODEL).max_length)
    got = api.loglikelihood(requests)
    assert len(got) == len(hflm_answers) == len(requests)
    assert any(g for _, g in hflm_answers) and not all(g for _, g in hflm_answers)
    for (ll, greedy), (ref_ll, ref_greedy) in zip(got, hflm_answers):
        assert ll == pytest.approx(ref_ll, abs=TOL)
        assert greedy == ref_greedy


@pytest.fixture(scope="module")
def one_model(served, stand_ins, sharp_stand_ins):
    """An app (under /one) serving only the causal stand-in, with a WINDOW-token window: lm-eval's
    remote tokenizer names no model, so the service must serve one dialogue model."""
    args = app_args(stand_ins, models=[
        {"name": MODEL, "overrides": {"source": str(sharp_stand_ins["gpt2"]), "max_length": WINDOW},
         "serving": ONE_THREAD}])
    with deploy_app(served, "one", args) as app:
        yield app


def _remote(app, **kwargs):
    from lm_eval.models.openai_completions import LocalCompletionsAPI

    return LocalCompletionsAPI(base_url=f"{app.url}/v1/completions", model=MODEL, batch_size=3,
                               max_retries=1, **kwargs)


@pytest.mark.parametrize("tokenized_requests", [True, False])
def test_remote_tokenizer_matches_hflm(one_model, requests, hflm_answers, tokenized_requests):
    api = _remote(one_model, tokenized_requests=tokenized_requests, max_length=WINDOW)
    assert api.tokenizer_backend == "remote"  # lm-eval's "auto" found /tokenizer_info, /tokenize
    got = api.loglikelihood(requests)
    assert len(got) == len(hflm_answers) == len(requests)
    for (ll, greedy), (ref_ll, ref_greedy) in zip(got, hflm_answers):
        assert ll == pytest.approx(ref_ll, abs=TOL)
        assert greedy == ref_greedy


@pytest.fixture(scope="module")
def long_requests():
    """Two pairs of more than WINDOW tokens in all (the second with a continuation of about half
    the window; lm-eval's API models fail on a continuation as long as the window), one short."""
    from lm_eval.api.instance import Instance

    pairs = [("Once upon a time " * 30, " there was a cat."),
             ("A long day. " * 12, " and then" * 3),
             ("Hello", " world")]
    return [Instance(request_type="loglikelihood", doc={}, arguments=p, idx=i)
            for i, p in enumerate(pairs)]


def test_long_contexts_equal_hflm_with_max_length_two_less(one_model, sharp_stand_ins,
                                                           long_requests):
    from lm_eval.models.huggingface import HFLM

    def hflm(max_length: int):
        return HFLM(pretrained=str(sharp_stand_ins["gpt2"]), backend="causal", device="cpu",
                    dtype="float32", batch_size=4, max_length=max_length)

    got = _remote(one_model, tokenized_requests=True, max_length=WINDOW).loglikelihood(long_requests)
    same = hflm(WINDOW - 2).loglikelihood(long_requests)
    for (ll, greedy), (ref_ll, ref_greedy) in zip(got, same):
        assert ll == pytest.approx(ref_ll, abs=TOL)
        assert greedy == ref_greedy
    # HFLM given the window itself conditions the long ones on two more tokens: different numbers.
    other = hflm(WINDOW).loglikelihood(long_requests)
    assert [abs(a[0] - b[0]) > TOL for a, b in zip(got, other)] == [True, True, False]


def test_without_max_length_a_prompt_over_the_window_is_refused(one_model, long_requests):
    api = _remote(one_model, tokenized_requests=True)  # lm-eval assumes max_length 2048
    with pytest.raises(http.HTTPError) as caught:
        api.loglikelihood(long_requests[:1])
    assert caught.value.response.status_code == 422
    assert caught.value.response.json()["error"]["param"] == "prompt[0]"  # lm-eval sends a list
