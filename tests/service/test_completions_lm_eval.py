"""lm-evaluation-harness, unmodified, against POST /v1/completions on the real Serve app: its
`local-completions` model (LocalCompletionsAPI: echo, logprobs 1, max_tokens 1, the answer sliced
``[ctxlen:-1]``, is_greedy from ``top_logprobs``), with token-id and with text prompts, reports the
same log-likelihoods and is_greedy flags as lm-eval's own `hf` model (HFLM) on the served
checkpoint folder (the gpt2 stand-in re-initialised at std 0.3)."""

from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.serve

MODEL = "dialogpt-medium"
TOL = 1e-4
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
