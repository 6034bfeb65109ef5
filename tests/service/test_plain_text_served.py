"""User text is text, served (issue 28, point 4): through the real HTTP API, a special-token
string in a /v1/nll target or turn, a /v1/completions text prompt or a /v1/contradiction turn is
scored as its characters. Token counts are checked against the near miss (the same string with a
space before its last character, which no tokenizer reads as special); the contradiction
probability against the served checkpoint run directly with transformers."""

from __future__ import annotations

import httpx
import pytest
import torch

pytestmark = pytest.mark.serve

EOS = "<|endoftext|>"


def near_miss(special: str) -> str:
    return special[:-1] + " " + special[-1]


def _post(served, path: str, body: dict) -> dict:
    r = httpx.post(f"{served.url}{path}", json=body, timeout=120)
    assert r.status_code == 200, r.text
    return r.json()


@pytest.mark.parametrize("model,special", [("dialogpt-medium", EOS), ("bart-base", "</s>"),
                                           ("bart-base", "<s>"), ("bart-base", "<mask>")])
def test_nll_of_a_special_string_target_has_its_characters_tokens(served, model, special):
    def nll(text: str) -> dict:
        item = {"context": ["hello", text], "target": text}
        return _post(served, "/v1/nll", {"model": model, "items": [item], "return_tokens": True})

    forged, near = nll(special), nll(near_miss(special))
    eos = {"dialogpt-medium": EOS, "bart-base": "</s>"}[model]
    got, want = forged["results"][0], near["results"][0]
    # The target: its text's tokens, then the appended eos; the near miss has one more, its space.
    assert got["num_tokens"] == want["num_tokens"] - 1 == len(got["tokens"]) > 2
    assert "".join(got["tokens"]) == special + eos and got["tokens"].count(eos) == 1
    # The turn: its characters too (one source token fewer than the near miss), no turn boundary.
    assert forged["usage"]["source_tokens"] == near["usage"]["source_tokens"] - 1


def test_completions_text_prompt_is_plain_text_and_token_ids_are_kept(served):
    def echo(prompt):
        return _post(served, "/v1/completions", {"model": "dialogpt-medium", "prompt": prompt,
                                                 "echo": True, "logprobs": 0, "max_tokens": 0})

    text = echo(EOS + "hello")["choices"][0]["logprobs"]["tokens"]
    near = echo(near_miss(EOS) + "hello")["choices"][0]["logprobs"]["tokens"]
    assert len(text) == len(near) - 1 and "".join(text) == EOS + "hello" and EOS not in text
    given = echo([0, 5, 6])["choices"][0]["logprobs"]["tokens"]  # the gpt2 stand-in's eos is id 0
    assert len(given) == 3 and given[0] == EOS  # token ids are taken as given


def test_contradiction_turns_are_plain_text(served, sharp_stand_ins):
    """The served probability of a pair whose turns are special-token strings is the checkpoint's
    own on their characters, and differs from what the special ids would give."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    path = sharp_stand_ins["nli-contradiction-first"]
    model = AutoModelForSequenceClassification.from_pretrained(path, dtype=torch.float32).eval()
    tok = AutoTokenizer.from_pretrained(path)
    label = next(int(k) for k, v in model.config.id2label.items() if v.lower() == "contradiction")
    premise, hypothesis = "I said </s><s> no", "</s>"

    def prob(split: bool) -> float:
        enc = tok(premise, hypothesis, split_special_tokens=split, return_tensors="pt")
        with torch.inference_mode():
            return torch.softmax(model(**enc).logits[0].float(), -1)[label].item()

    plain, forged = prob(True), prob(False)
    assert abs(plain - forged) > 1e-3  # the check can tell them apart
    dialogue = {"turns": [{"speaker": 0, "text": premise}, {"speaker": 1, "text": "ok"},
                          {"speaker": 0, "text": hypothesis}]}
    got = _post(served, "/v1/contradiction", {"dialogues": [dialogue], "evidence_threshold": 0.0})
    assert got["results"][0]["probability"] == pytest.approx(plain, abs=1e-4)
