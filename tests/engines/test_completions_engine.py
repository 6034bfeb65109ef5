"""Completions log-probs on the NLL engine (POST /v1/completions' work, without Ray): the prompt's
log-probs, the top-k alternatives and the greedy next token, against the model's own log-softmax
computed directly with transformers; the plain NLL numbers are unchanged by the top-k projection.

The causal stand-in is re-initialised at std 0.3 so log-probs vary by token (at the default init
every token sits near -log(vocab) and the argmax would be arbitrary).
"""

from __future__ import annotations

import random

import pytest
import torch

from dialscore_server.checkpoints.loading import load_model
from dialscore_server.checkpoints.standins import reinit_
from dialscore_server.contract.errors import InputError
from dialscore_server.nll.completions.serving import CompletionCall, build_choice
from dialscore_server.nll.engine.encoding import EncodedItem, NLLItem
from dialscore_server.nll.engine.engine import NLLEngine
from dialscore_server.nll.engine.projection import ScoredPosition

TOL = 1e-4


@pytest.fixture(scope="module")
def engine(stand_in_registry) -> NLLEngine:
    lm = load_model(stand_in_registry.get("dialogpt-medium"))
    reinit_(lm.model, 0.3, seed=3)
    return NLLEngine(lm.config, loaded=lm, token_budget=4096)


def reference(engine: NLLEngine, ids: list[int]) -> torch.Tensor:
    """log-softmax over the vocabulary at every position of `ids`, one sequence, float32."""
    with torch.inference_mode():
        logits = engine.model(input_ids=torch.tensor([ids])).logits[0].float()
    return torch.log_softmax(logits, dim=-1)


def prompts(engine: NLLEngine, n: int, seed: int = 0) -> list[list[int]]:
    rng = random.Random(seed)
    vocab = engine.model.get_input_embeddings().weight.shape[0]
    return [[rng.randrange(vocab) for _ in range(rng.randint(2, 40))] for _ in range(n)]


@pytest.mark.parametrize("prefix_reuse", [True, False])
def test_prompt_logprobs_top_k_and_greedy_token_match_transformers(engine, prefix_reuse):
    engine.prefix_reuse = prefix_reuse
    try:
        ps = prompts(engine, 6)
        ps.append(ps[0] + ps[1][:5])  # shares ps[0] as a prefix: a prefix-reuse group
        ps.append(ps[0][:30] + [7, 8])
        items = [engine.encode_prompt(p, append_next=True, top_k=5) for p in ps]
        results, _ = engine.score_encoded(items)
    finally:
        engine.prefix_reuse = True
    for p, r in zip(ps, results):
        ref = reference(engine, p)
        # Positions 0..n-2 predict p[1:]; position n-1 predicts the next token.
        expect = ref[torch.arange(len(p) - 1), torch.tensor(p[1:])]
        got = torch.tensor([-x for x in r.token_nlls[:-1]])
        assert torch.allclose(got, expect, atol=TOL), (got - expect).abs().max()
        assert r.alternatives is not None and len(r.alternatives) == len(p)
        for j, alt in enumerate(r.alternatives):
            values, ids = ref[j].topk(5)
            assert torch.allclose(torch.tensor(alt.logprobs), values, atol=TOL)
            assert list(alt.ids) == ids.tolist()
        assert r.alternatives[-1].ids[0] == int(ref[-1].argmax())


def test_top_k_projection_leaves_target_logprobs_bit_identical(engine):
    ps = prompts(engine, 4, seed=1)
    plain = [EncodedItem((p[0],), tuple(p[1:]), False) for p in ps]
    with_k = [EncodedItem((p[0],), tuple(p[1:]), False, top_k=3) for p in ps]
    a, _ = engine.score_encoded(plain)
    b, _ = engine.score_encoded(with_k)
    assert [r.token_nlls for r in a] == [r.token_nlls for r in b]
    assert all(r.alternatives is None for r in a) and all(r.alternatives for r in b)
    # Mixed in one call: the plain items still get no alternatives, and the same numbers.
    mixed, _ = engine.score_encoded(plain[:2] + with_k[2:])
    assert [r.alternatives is None for r in mixed] == [True, True, False, False]
    assert [r.token_nlls for r in mixed] == [r.token_nlls for r in a]


def test_projection_returns_records_only_when_top_k_is_asked(engine):
    hidden = torch.randn(3, engine.model.config.hidden_size)
    targets = torch.tensor([1, 2, 3])
    plain = engine.projection(hidden, targets)
    rec = engine.projection(hidden, targets, [0, 2, 0])
    assert all(isinstance(x, float) for x in plain)
    assert all(isinstance(x, ScoredPosition) for x in rec)
    assert [x.logprob for x in rec] == plain
    assert rec[0].alternatives is None and rec[2].alternatives is None
    assert len(rec[1].alternatives.ids) == 2


def test_nll_items_unchanged_by_completions_support(engine):
    """A /v1/nll item is scored exactly as before: no alternatives, mean of token NLLs."""
    (r,) = engine.score([NLLItem(target="hello there", context=("hi",))])
    assert r.alternatives is None and r.num_tokens == len(r.token_nlls)


def test_choice_echo_layout_and_offsets(engine):
    text = "Hello world, how are you"
    item = engine.encode_prompt(text, append_next=True, top_k=2)
    (r,), _ = engine.score_encoded([item])
    call = CompletionCall([text], ["prompt"], echo=True, generate=True, logprobs=2)
    c = build_choice(text, item, r, call=call, decoder=engine)
    ids = engine.encoder.tokenize(text)
    lp = c.logprobs
    assert lp is not None and len(lp.tokens) == len(ids) + 1
    assert lp.token_logprobs[0] is None and lp.top_logprobs[0] is None
    assert lp.tokens[:-1] == engine.token_strings(ids)
    greedy = r.alternatives[-1].ids[0]
    assert c.text == text + engine.decode([greedy])
    assert lp.text_offset == [sum(len(t) for t in lp.tokens[:j]) for j in range(len(lp.tokens))]
    assert c.text[lp.text_offset[-1]:] == lp.tokens[-1]
    for tok, value, top in zip(lp.tokens[1:], lp.token_logprobs[1:], lp.top_logprobs[1:]):
        assert top[tok] == value and len(top) <= 3  # the token itself joins the top 2


def test_prompt_errors(engine):
    window = engine.config.max_length
    with pytest.raises(InputError, match="window"):
        engine.encode_prompt([5] * window, append_next=True, top_k=1)
    engine.encode_prompt([5] * window, append_next=False, top_k=1)  # fits without the new token
    with pytest.raises(InputError, match="vocabulary"):
        engine.encode_prompt([10 ** 7], append_next=False, top_k=1)
    with pytest.raises(InputError, match="no tokens"):
        engine.encode_prompt("", append_next=True, top_k=1)


def test_gpu_pass_limits_run_fewer_passes_with_the_same_numbers(engine):
    """Prompts sharing contexts of several lengths, as lm-eval sends a multiple-choice task's
    options: the GPU's pass limits (here on CPU) cut them into fewer passes, with each token's
    log-probability and alternatives equal to the CPU limits' to float rounding."""
    from dialscore_server.scheduling.planner import GPU_PASS_LIMITS

    rng = random.Random(5)
    vocab = engine.model.get_input_embeddings().weight.shape[0]
    batch = []
    for _ in range(12):
        context = [rng.randrange(vocab) for _ in range(rng.randint(20, 120))]
        batch += [context + [rng.randrange(vocab) for _ in range(rng.randint(3, 30))]
                  for _ in range(4)]
    gpu = NLLEngine(engine.config, loaded=engine.loaded, token_budget=4096,
                    pass_limits=GPU_PASS_LIMITS)
    (cpu_results, cpu_stats), (gpu_results, gpu_stats) = (
        e.score_encoded([e.encode_prompt(p, append_next=True, top_k=2) for p in batch])
        for e in (engine, gpu))
    assert gpu_stats.forward_passes < cpu_stats.forward_passes, (gpu_stats, cpu_stats)
    for a, b in zip(cpu_results, gpu_results):
        assert a.token_ids == b.token_ids
        assert a.token_nlls == pytest.approx(b.token_nlls, rel=TOL, abs=TOL)
        assert [x.ids for x in a.alternatives] == [x.ids for x in b.alternatives]
