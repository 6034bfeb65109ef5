"""The NLL engine (issue 2, spec section 1): exact, batch-independent per-token NLL.

Every model here has its weights re-initialised at std 0.3 (``reinit_``): at the stand-ins' small
default init every token's NLL is close to log(vocab) and padding, position or span bugs would
go unnoticed. References are computed independently: one item at a time, and with the model's
own loss (HF ``labels`` with -100 on unscored positions).
"""

from __future__ import annotations

import math
import random

import pytest
import torch

from dialscore_server.contract.errors import InputError
from dialscore_server.checkpoints.loading import LoadedModel, load_model
from dialscore_server.nll.engine.encoding import EmptyTargetError, EncodedItem, NLLItem, TargetTooLongError
from dialscore_server.nll.engine.engine import NLLEngine
from dialscore_server.scheduling import planner
from dialscore_server.nll.engine.layout import Special
from dialscore_server.checkpoints.registry import ModelConfig
from dialscore_server.checkpoints.standins import MARKER, reinit_, templated_sentences
from model_helpers import lay_out_as_hub_cache

TOL = 1e-4
GENERATIVE = ("dialogpt-medium", "bart-base", "blenderbot-400m")
SEQ2SEQ = ("bart-base", "blenderbot-400m")

UNICODE_TARGETS = (
    "café naïve — “quotes”",
    "😀 🎉 😂 ❤️",
    "日本語 テスト",
    "👩\u200d👩\u200d👧 family",          # emoji joined with ZWJ
    "¿qué? ça va! Ünïcödé",
    "e\u0301 combining accent",         # e + combining acute, not NFC-normalised
)


# --------------------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def loaded(stand_in_registry) -> dict[str, LoadedModel]:
    """Each generative stand-in, loaded once per module with weights re-initialised at std 0.3
    (and the seq2seq models' final_logits_bias randomised)."""
    out = {}
    for name in GENERATIVE:
        lm = load_model(stand_in_registry.get(name))
        reinit_(lm.model, 0.3, seed=1)
        bias = getattr(lm.model, "final_logits_bias", None)
        if bias is not None:  # a zero buffer at init: randomise it so a missed bias is caught
            gen = torch.Generator().manual_seed(2)
            bias.copy_(torch.randn(bias.shape, generator=gen))
        out[name] = lm
    return out


def engine_for(loaded, name: str, token_budget: int = 4096,
               pass_limits: planner.PassLimits | None = None, **config_overrides) -> NLLEngine:
    lm = loaded[name]
    cfg = lm.config.model_copy(update=config_overrides) if config_overrides else lm.config
    return NLLEngine(cfg, loaded=lm, token_budget=token_budget, pass_limits=pass_limits)


def assert_same(a, b, tol=TOL):
    """Two NLLResults agree: same tokens, same per-token NLLs and mean (to `tol`), same flags."""
    assert a.token_ids == b.token_ids
    assert a.num_tokens == b.num_tokens == len(a.token_nlls)
    assert a.truncated == b.truncated
    assert a.source_tokens == b.source_tokens
    assert a.nll == pytest.approx(b.nll, abs=tol)
    assert max(abs(x - y) for x, y in zip(a.token_nlls, b.token_nlls)) < tol


# ------------------------------------------------------------------------- ragged encoded items
def _window(engine: NLLEngine) -> tuple[int, int]:
    """(longest source, longest target) the engine accepts for this model."""
    w = engine.config.max_length
    if engine.config.family == "causal":
        return w - 1, w - 1
    return w, w - len(engine.encoder.decoder_prefix) + 1


def ragged_items(engine: NLLEngine, n: int, seed: int) -> list[EncodedItem]:
    """`n` encoded items with source and target lengths from 1 token to the window.

    Lengths are log-uniform (most items short, some long) plus the corner cases; for seq2seq about
    a third of the items reuse an earlier item's source, as probes and reranking do.
    """
    rng = random.Random(seed)
    vocab = engine.model.config.vocab_size
    max_src, max_tgt = _window(engine)
    w = engine.config.max_length
    causal = engine.config.family == "causal"

    def ids(k):
        return tuple(rng.randrange(vocab) for _ in range(k))

    def loglen(hi):
        return max(1, min(hi, int(math.exp(rng.uniform(0, math.log(hi + 1))))))

    if causal:
        corners = [(1, 1), (1, max_tgt), (w - 1, 1), (w // 2, w - w // 2)]
    else:
        corners = [(1, 1), (1, max_tgt), (max_src, 1), (max_src, max_tgt)]
    items: list[EncodedItem] = []
    for k in range(n):
        if k < len(corners):
            s_len, t_len = corners[k]
        else:
            t_len = loglen(max_tgt)
            s_len = loglen(w - t_len if causal else max_src)
        if not causal and items and rng.random() < 0.35:
            src = rng.choice(items).source_ids  # shared source: encoded once per batch
        else:
            src = ids(s_len)
        items.append(EncodedItem(src, ids(t_len), truncated=rng.random() < 0.2))
    rng.shuffle(items)
    return items


@pytest.fixture(scope="module")
def ragged(loaded):
    """Per model: 64 ragged items and each one's result scored alone (computed once per module)."""
    cache: dict[str, tuple[list[EncodedItem], list]] = {}

    def get(name):
        if name not in cache:
            engine = engine_for(loaded, name)
            items = ragged_items(engine, 64, seed=GENERATIVE.index(name))
            cache[name] = (items, [engine.score_encoded([e])[0][0] for e in items])
        return cache[name]

    return get


# ------------------------------------------------------------------- batched == one at a time
@pytest.mark.parametrize("budget", [10**9, 256], ids=["one-pass", "small-budget"])
@pytest.mark.parametrize("name", GENERATIVE)
def test_batched_equals_one_at_a_time(loaded, ragged, name, budget):
    """Ragged batches of 1..64 items give each item's NLL alone (right padding, masks, positions,
    encoder reuse); with a small budget the items are sorted into many batches, and results still
    come back in input order. The one-pass case lets any padding into a pass, so that every row
    is padded beside rows of other lengths."""
    items, singles = ragged(name)
    engine = engine_for(loaded, name, token_budget=budget, pass_limits=(
        planner.PassLimits(overhead_tokens=10**9) if budget == 10**9 else None))
    rng = random.Random(7)
    for size in (1, 2, 5, 17, 64):
        chosen = rng.sample(range(len(items)), size)
        results, stats = engine.score_encoded([items[i] for i in chosen])
        assert len(results) == size
        for i, res in zip(chosen, results):
            assert_same(res, singles[i])
        assert sum(stats.batch_sizes) == size == stats.items
        if budget == 10**9:
            assert stats.batches == 1
    if budget == 256:
        assert stats.batches > 5  # the 64-item call really was split


@pytest.mark.parametrize("name", GENERATIVE)
def test_projection_in_small_chunks_equals_one_chunk(loaded, ragged, name):
    """Target positions projected to the vocabulary a few at a time (chunks that split items)
    give the same NLLs as all at once; the CPU default chunk holds about 2^23 logits."""
    from dialscore_server.nll.engine.projection import default_projection_chunk

    items, singles = ragged(name)
    lm = loaded[name]
    for chunk in (1, 7):
        engine = NLLEngine(lm.config, loaded=lm, token_budget=4096, projection_chunk=chunk)
        results, _ = engine.score_encoded(items)
        for res, single in zip(results, singles):
            assert_same(res, single)
    vocab = lm.model.get_output_embeddings().weight.shape[0]
    assert engine_for(loaded, name).projection.chunk == default_projection_chunk("cpu", vocab)
    assert default_projection_chunk("cpu", 50257) == 166 and default_projection_chunk("cuda:0", 50257) == 1024
    with pytest.raises(ValueError):
        NLLEngine(lm.config, loaded=lm, projection_chunk=0)


@pytest.mark.parametrize("name", GENERATIVE)
def test_plan_respects_budget_and_sorts(loaded, ragged, name):
    """Every batch fits the token budget unless it is a single oversized item; causal batches are
    formed from length-sorted items, so padding waste is small."""
    items, _ = ragged(name)
    budget = 600
    engine = engine_for(loaded, name, token_budget=budget)
    plan = engine._plan(items)
    assert sorted(i for batch in plan for i in batch) == list(range(len(items)))
    for batch in plan:
        rows = [items[i] for i in batch]
        assert len(batch) == 1 or engine._padded_cost(rows) <= budget
    if engine.config.family == "causal":
        costs = [[items[i].cost for i in batch] for batch in plan]
        for prev, nxt in zip(costs, costs[1:]):
            assert max(prev) <= min(nxt)
        _, stats = engine.score_encoded(items)
        assert stats.real_tokens == sum(e.cost for e in items)
        assert stats.padded_tokens >= stats.real_tokens
        assert stats.padding_waste < 0.15


def test_padding_waste_counts_padding(loaded):
    """BatchStats.padding_waste is the share of computed positions that were padding."""
    engine = engine_for(loaded, "dialogpt-medium", token_budget=10**6)
    items = [EncodedItem((5,), (6,) * 3, False), EncodedItem((5,) * 4, (6,) * 4, False)]
    _, stats = engine.score_encoded(items)
    assert (stats.real_tokens, stats.padded_tokens, stats.batches) == (12, 16, 1)
    assert stats.padding_waste == pytest.approx(0.25)
    assert stats.target_tokens == 7


@pytest.mark.parametrize("name", SEQ2SEQ)
def test_encoder_runs_once_per_distinct_source(loaded, name):
    """Many targets against one source: each distinct source goes through the encoder once."""
    engine = engine_for(loaded, name, token_budget=10**6)
    rng = random.Random(3)
    sources = [tuple(rng.randrange(5, 600) for _ in range(n)) for n in (7, 12, 12)]
    items = [EncodedItem(sources[k % 3], tuple(rng.randrange(5, 600) for _ in range(1 + k)), False)
             for k in range(12)]
    rng.shuffle(items)
    rows_seen = []
    hook = engine.model.get_encoder().register_forward_hook(
        lambda module, args, out: rows_seen.append(out.last_hidden_state.shape[0]))
    try:
        results, _ = engine.score_encoded(items)
    finally:
        hook.remove()
    assert rows_seen == [3]
    for item, res in zip(items, results):
        assert_same(res, engine.score_encoded([item])[0][0])


@pytest.mark.parametrize("name", GENERATIVE)
def test_text_items_batched_equal_alone(loaded, name):
    """The full text path (formatting, knowledge, truncation, unicode) is batch-independent too."""
    engine = engine_for(loaded, name, max_length=32, token_budget=300)
    sents = templated_sentences(40, seed=5)
    items = [NLLItem(target=sents[k], context=tuple(sents[k + 1:k + 1 + k % 6]),
                     knowledge=sents[-1] if k % 4 == 0 else None) for k in range(24)]
    items += [NLLItem(target=t, context=(t, "hi")) for t in UNICODE_TARGETS]
    items += [NLLItem(target="ok", source=""), NLLItem(target="ok", context=())]
    batched = engine.score(items)
    assert any(r.truncated for r in batched) and not all(r.truncated for r in batched)
    for item, res in zip(items, batched):
        assert_same(res, engine.score([item])[0])


# --------------------------------------------------------------- equals the model's own loss
def _hf_reference(engine: NLLEngine, enc: EncodedItem) -> tuple[float, list[float]]:
    """(mean loss, per-token NLLs) from the model's full forward pass with HF `labels`."""
    model = engine.model
    with torch.no_grad():
        if engine.config.family == "causal":
            ids = torch.tensor([list(enc.source_ids + enc.target_ids)])
            labels = torch.tensor([[-100] * len(enc.source_ids) + list(enc.target_ids)])
            out = model(input_ids=ids, labels=labels)
            logits, gold = out.logits[0, :-1], labels[0, 1:]
        else:
            prefix = engine.encoder.decoder_prefix
            dec = list(prefix + enc.target_ids)
            lab = dec[1:]
            lab[: len(prefix) - 1] = [-100] * (len(prefix) - 1)
            out = model(input_ids=torch.tensor([list(enc.source_ids)]),
                        decoder_input_ids=torch.tensor([dec[:-1]]), labels=torch.tensor([lab]))
            logits, gold = out.logits[0], torch.tensor(lab)
        keep = gold != -100
        per_token = torch.nn.functional.cross_entropy(
            logits[keep].float(), gold[keep], reduction="none")
    return out.loss.item(), per_token.tolist()


@pytest.mark.parametrize("name", GENERATIVE)
def test_equals_model_loss_single_items(loaded, name):
    """For single items, the engine's mean NLL is the model's own loss and its per-token NLLs are
    the cross-entropies at the target positions (source masked with -100)."""
    engine = engine_for(loaded, name)
    sents = templated_sentences(12, seed=11)
    items = [
        NLLItem(target=sents[0], context=(sents[1], sents[2])),
        NLLItem(target=sents[3], context=()),                       # empty context
        NLLItem(target="x", context=(sents[4],)),                    # one-token target (+ eos)
        NLLItem(target=sents[5], context=(sents[6],), knowledge=sents[7]),
        NLLItem(target="café 😀 日本語", source="why? " + sents[8]),
    ]
    for item in items:
        enc = engine.encode(item)
        res = engine.score([item])[0]
        loss, per_token = _hf_reference(engine, enc)
        assert res.nll == pytest.approx(loss, abs=TOL)
        assert len(per_token) == res.num_tokens == len(enc.target_ids)
        assert max(abs(a - b) for a, b in zip(res.token_nlls, per_token)) < TOL


@pytest.mark.parametrize("name", GENERATIVE)
def test_ragged_singles_equal_model_loss(loaded, ragged, name):
    """The one-at-a-time references above are themselves the model's own loss, corner cases
    included (1-token sources and targets, sequences filling the whole window)."""
    engine = engine_for(loaded, name)
    items, singles = ragged(name)
    assert max(e.cost for e in items) >= engine.config.max_length  # the window is reached
    for enc, res in zip(items, singles):
        loss, per_token = _hf_reference(engine, enc)
        assert res.nll == pytest.approx(loss, abs=TOL)
        assert max(abs(a - b) for a, b in zip(res.token_nlls, per_token)) < TOL


def test_blenderbot_matches_hf_label_shift(loaded):
    """BlenderBot (no forced bos): the engine equals the loss HF computes from `labels` alone,
    shifting them right with decoder_start_token_id itself — an independent check of the prefix."""
    engine = engine_for(loaded, "blenderbot-400m")
    item = NLLItem(target="I live in a small town.", context=("where do you live?",))
    enc = engine.encode(item)
    with torch.no_grad():
        loss = engine.model(input_ids=torch.tensor([list(enc.source_ids)]),
                            labels=torch.tensor([list(enc.target_ids)])).loss.item()
    assert engine.score([item])[0].nll == pytest.approx(loss, abs=TOL)


# ------------------------------------------------------------------- formatting and truncation
def _ids(engine, text):
    """The ids of an expected layout written as one string: special-token strings in it are the
    format's special tokens (the tokenizer's usual reading, which the engine never applies to
    user text: tests/engines/test_plain_text.py)."""
    return engine.tokenizer(text, add_special_tokens=False, split_special_tokens=False).input_ids


@pytest.mark.parametrize("name,joined", [
    ("dialogpt-medium", "a b<|endoftext|>c d<|endoftext|>"),
    ("blenderbot-400m", "a b  c d"),
    ("bart-base", "a b</s>c d"),  # was "a b </s> c d": a lone space token before </s>
])
def test_turns_use_the_family_format(loaded, name, joined):
    engine = engine_for(loaded, name)
    enc = engine.encode(NLLItem(target="ok", context=("a b", "c d")))
    body = _ids(engine, joined)
    if name == "bart-base":
        body = [engine.encoder.bos_id] + body + [engine.encoder.eos_id]
    elif name == "blenderbot-400m":
        body = body + [engine.encoder.eos_id]
    assert list(enc.source_ids) == body
    assert list(enc.target_ids) == _ids(engine, "ok") + [engine.encoder.eos_id]


def _token_cut(loaded, name: str) -> dict:
    """Config overrides selecting token-level truncation (ParlAI's; the default drops whole turns,
    tests/engines/test_layout.py)."""
    return {"format": loaded[name].config.format.model_copy(update={"truncation": "tokens"})}


def test_causal_left_truncation_cuts_oldest_tokens_keeps_target(loaded):
    engine = engine_for(loaded, "dialogpt-medium", max_length=24,
                        **_token_cut(loaded, "dialogpt-medium"))
    turns = tuple(templated_sentences(8, seed=2))
    target = "I am fine, thanks."
    enc = engine.encode(NLLItem(target=target, context=turns))
    full = engine.encoder.ids(engine.format_parts(NLLItem(target=target, context=turns))[1])
    tgt = _ids(engine, target) + [engine.encoder.eos_id]
    assert enc.truncated
    assert list(enc.target_ids) == tgt                      # never cut
    assert list(enc.source_ids) == full[-(24 - len(tgt)):]  # newest tokens kept
    assert enc.cost == 24
    res = engine.score([NLLItem(target=target, context=turns)])[0]
    assert res.truncated and res.source_tokens == 24 - len(tgt)
    short = engine.encode(NLLItem(target=target, context=turns[-1:]))
    assert not short.truncated and list(short.source_ids) == _ids(engine, turns[-1] + "<|endoftext|>")


def test_knowledge_is_pinned_when_history_is_cut(loaded):
    """The knowledge sentence (before the history) survives truncation; the oldest history goes."""
    engine = engine_for(loaded, "dialogpt-medium", max_length=40,
                        **_token_cut(loaded, "dialogpt-medium"))
    knowledge = "my sister adopted a puppy"
    turns = tuple(templated_sentences(10, seed=4))
    item = NLLItem(target="ok", context=turns, knowledge=knowledge)
    enc = engine.encode(item)
    pinned, history = engine.format_parts(item)
    pinned_ids, hist_ids = engine.encoder.ids(pinned), engine.encoder.ids(history)
    assert pinned == (knowledge, Special("<|endoftext|>"))
    room = 40 - len(enc.target_ids)
    assert enc.truncated
    assert list(enc.source_ids) == pinned_ids + hist_ids[-(room - len(pinned_ids)):]
    # Only when no history fits is the knowledge itself cut, from its left.
    tiny = engine_for(loaded, "dialogpt-medium", max_length=8, **_token_cut(loaded, "dialogpt-medium"))
    enc = tiny.encode(NLLItem(target="ok", context=turns, knowledge=knowledge * 3))
    pinned_ids = _ids(tiny, knowledge * 3 + "<|endoftext|>")
    assert list(enc.source_ids) == pinned_ids[-(8 - len(enc.target_ids)):]


def test_knowledge_after_history_is_kept_as_newest(loaded):
    lm = loaded["dialogpt-medium"]
    fmt = lm.config.format.model_copy(update={"knowledge_position": "after_history"})
    engine = engine_for(loaded, "dialogpt-medium", max_length=30, format=fmt)
    turns = tuple(templated_sentences(10, seed=4))
    enc = engine.encode(NLLItem(target="ok", context=turns, knowledge="Emma is grateful."))
    tail = _ids(engine, "Emma is grateful.<|endoftext|>")
    assert enc.truncated and list(enc.source_ids[-len(tail):]) == tail


@pytest.mark.parametrize("name", SEQ2SEQ)
def test_seq2seq_left_truncation_keeps_special_tokens(loaded, name):
    engine = engine_for(loaded, name, max_length=20, **_token_cut(loaded, name))
    item = NLLItem(target="I live in a small town.", context=tuple(templated_sentences(6, seed=8)))
    enc = engine.encode(item)
    body = engine.encoder.ids(engine.format_parts(item)[1])
    head = [engine.encoder.bos_id] if engine.fmt.source_bos else []
    assert enc.truncated and len(enc.source_ids) == 20
    assert list(enc.source_ids) == head + body[-(20 - len(head) - 1):] + [engine.encoder.eos_id]
    assert engine.score([item])[0].truncated


# -------------------------------------------------------------------------- target too long
@pytest.mark.parametrize("name", GENERATIVE)
def test_target_too_long_is_an_error_at_exactly_the_window(loaded, name):
    target = " ".join(templated_sentences(4, seed=9))
    n = len(engine_for(loaded, name).encode(NLLItem(target=target, context=())).target_ids)
    prefix = len(engine_for(loaded, name).encoder.decoder_prefix)
    fits = n + 1 if name == "dialogpt-medium" else n + prefix - 1  # the largest-needed window
    ok = engine_for(loaded, name, max_length=fits)
    res = ok.score([NLLItem(target=target, context=("a long history " * 20,))])[0]
    assert res.num_tokens == n and res.truncated
    too_small = engine_for(loaded, name, max_length=fits - 1)
    with pytest.raises(TargetTooLongError) as err:
        too_small.score([NLLItem(target=target, context=())])
    assert f"target has {n} tokens" in str(err.value)
    assert "never truncated" in str(err.value)
    assert err.value.param == "target" and isinstance(err.value, ValueError)


# ------------------------------------------------------------------ empty context and target
def test_causal_empty_context_conditions_on_bos(loaded):
    engine = engine_for(loaded, "dialogpt-medium")
    for item in (NLLItem(target="hello there", context=()), NLLItem(target="hello there", source="")):
        enc = engine.encode(item)
        assert enc.source_ids == (engine.encoder.bos_id,)
        res = engine.score([item])[0]
        tgt = _ids(engine, "hello there") + [engine.encoder.eos_id]
        assert res.token_ids == tgt and res.num_tokens == len(tgt)  # first token is scored
        assert res.source_tokens == 1 and not res.truncated
        loss, per_token = _hf_reference(engine, enc)
        assert res.token_nlls[0] == pytest.approx(per_token[0], abs=TOL)
        assert res.nll == pytest.approx(loss, abs=TOL)


@pytest.mark.parametrize("name", SEQ2SEQ)
def test_seq2seq_empty_context(loaded, name):
    engine = engine_for(loaded, name)
    enc = engine.encode(NLLItem(target="hi", context=()))
    expected = ([engine.encoder.bos_id] if engine.fmt.source_bos else []) + [engine.encoder.eos_id]
    assert list(enc.source_ids) == expected
    res = engine.score([NLLItem(target="hi", context=())])[0]
    assert math.isfinite(res.nll) and res.num_tokens == len(enc.target_ids)


@pytest.mark.parametrize("name", GENERATIVE)
def test_empty_target(loaded, name):
    """With append_eos an empty target, or one of whitespace only, scores the eos alone (the
    chance of an empty reply); without it there is nothing to score and the engine says so."""
    engine = engine_for(loaded, name)
    empty, blank = engine.score([NLLItem(target="", context=("hi",)),
                                 NLLItem(target=" \n\t ", context=("hi",))])
    assert empty.token_ids == [engine.encoder.eos_id] and empty.num_tokens == 1
    assert_same(blank, empty)
    fmt = engine.fmt.model_copy(update={"append_eos": False})
    bare = engine_for(loaded, name, format=fmt)
    for target in ("", " \n\t "):
        with pytest.raises(EmptyTargetError) as err:
            bare.score([NLLItem(target=target, context=("hi",))])
        assert err.value.param == "target" and isinstance(err.value, InputError)
    assert bare.score([NLLItem(target="hi", context=())])[0].token_ids == _ids(engine, "hi")


@pytest.mark.parametrize("name", GENERATIVE)
def test_edge_whitespace_of_a_target_is_not_scored(loaded, name):
    """A target with leading or trailing whitespace scores exactly as the same target without it,
    in any batch: the same tokens (the stripped text's, then the eos), the same per-token NLLs,
    and that NLL is the model's own loss over those tokens (token layouts:
    tests/engines/test_layout.py)."""
    engine = engine_for(loaded, name)
    context = ("where do you live?", "why do you ask? ")
    clean = "I live in a small town."
    alone = engine.score([NLLItem(target=clean, context=context)])[0]
    assert alone.token_ids == _ids(engine, clean) + [engine.encoder.eos_id]
    padded = [clean + " ", clean + "\n", clean + "  ", " " + clean, "\n" + clean, " \n" + clean + " \n"]
    items = [NLLItem(target=t, context=context) for t in padded]
    items.append(NLLItem(target="I am  here\nnow.", context=context))  # inner whitespace: scored
    results = engine.score(items)
    for res in results[:-1]:
        assert_same(res, alone)
    loss, _ = _hf_reference(engine, engine.encode(items[0]))
    assert alone.nll == pytest.approx(loss, abs=TOL)
    assert results[-1].token_ids == _ids(engine, "I am  here\nnow.") + [engine.encoder.eos_id]


@pytest.mark.parametrize("name", GENERATIVE)
def test_no_items(loaded, name):
    results, stats = engine_for(loaded, name).score_encoded([])
    assert results == [] and stats.batches == 0 and stats.padding_waste == 0.0


def test_item_with_source_and_context_is_rejected():
    with pytest.raises(InputError):
        NLLItem(target="x", source="a", context=("b",))


# -------------------------------------------------------------------------------- unicode
@pytest.mark.parametrize("name", GENERATIVE)
def test_unicode_and_emoji_targets(loaded, name):
    """Non-ASCII and emoji targets round-trip through the byte-level tokenizer (no unknown token),
    score finite values, and equal the model's own loss."""
    engine = engine_for(loaded, name)
    unk = engine.tokenizer.unk_token_id
    for target in UNICODE_TARGETS:
        item = NLLItem(target=target, context=("😀 hi!", "ça va?"))
        res = engine.score([item])[0]
        body = res.token_ids[:-1]  # the appended eos
        assert unk is None or unk not in body
        assert engine.tokenizer.decode(body).strip() == target
        assert all(math.isfinite(x) and x >= 0 for x in res.token_nlls)
        assert res.nll == pytest.approx(_hf_reference(engine, engine.encode(item))[0], abs=TOL)
        assert len(engine.token_strings(res.token_ids)) == res.num_tokens


# ----------------------------------------------------------------------- engine construction
def test_engine_refuses_classifiers_and_bad_budgets(stand_in_registry):
    with pytest.raises(ValueError, match="classifier"):
        NLLEngine(stand_in_registry.get("roberta-large-mnli"))
    with pytest.raises(ValueError, match="token_budget"):
        NLLEngine(stand_in_registry.get("dialogpt-medium"), token_budget=0)


def test_engine_sets_torch_threads(loaded):
    before = torch.get_num_threads()
    try:
        engine = NLLEngine(loaded["dialogpt-medium"].config, loaded=loaded["dialogpt-medium"],
                           num_threads=1)
        assert engine.threads == 1 == torch.get_num_threads()
    finally:
        torch.set_num_threads(before)


# --------------------------------------------------------- trained model: natural < shuffled
@pytest.fixture(scope="module")
def trained_gpt2(word_order_gpt2, stand_in_registry):
    """An engine on the stand-in trained on templated sentences, and the sentences it saw."""
    cfg = stand_in_registry.get("dialogpt-medium").model_copy(update={"source": str(word_order_gpt2)})
    return NLLEngine(cfg), set(templated_sentences(3000, seed=21))


def test_trained_model_prefers_natural_over_shuffled(trained_gpt2):
    """Guards against sign and span errors: a model that has learned word order gives a held-out
    natural sentence a lower NLL than the same words shuffled, in at least 90% of cases."""
    engine, seen = trained_gpt2
    rng = random.Random(5)
    natural, shuffled = [], []
    for s in dict.fromkeys(templated_sentences(600, seed=99)):
        words = s.split()
        if s in seen or len(words) < 4:
            continue
        perm = words[:]
        while perm == words:
            rng.shuffle(perm)
        natural.append(NLLItem(target=s, context=()))
        shuffled.append(NLLItem(target=" ".join(perm), context=()))
        if len(natural) == 100:
            break
    assert len(natural) >= 50
    nat, shuf = engine.score(natural), engine.score(shuffled)
    wins = sum(a.nll < b.nll for a, b in zip(nat, shuf))
    assert wins / len(natural) >= 0.9, f"natural < shuffled in only {wins}/{len(natural)}"
    assert engine.stand_in


# ----------------------------------------------------------------- loading by hub id, offline
@pytest.fixture
def hub_cache(tmp_path, monkeypatch):
    """An empty hub cache that both the environment and huggingface_hub's constants point at."""
    import huggingface_hub.constants as hf_constants

    cache = tmp_path / "hub"
    cache.mkdir()
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    # huggingface_hub reads its environment once, at import; the resolvers read these constants.
    monkeypatch.setattr(hf_constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", True)
    return cache


def _hub_config(repo_id="microsoft/DialoGPT-medium") -> ModelConfig:
    from dialscore_server.checkpoints.registry import DIALOGPT_FORMAT

    return ModelConfig(name="dialogpt-medium", source=repo_id, family="causal",
                       format=DIALOGPT_FORMAT, max_length=512, device="cpu")


def test_loads_hub_id_from_offline_cache(stand_ins, hub_cache, stand_in_registry):
    snapshot = "0123456789abcdef0123456789abcdef01234567"
    lay_out_as_hub_cache(stand_ins / "gpt2", hub_cache, "microsoft/DialoGPT-medium", snapshot)
    cfg = _hub_config()
    assert not cfg.is_local and not cfg.stand_in
    lm = load_model(cfg)
    assert lm.stand_in                      # found through the marker in the cached snapshot
    assert lm.resolved_revision == snapshot
    engine = NLLEngine(cfg, loaded=lm)
    local = NLLEngine(stand_in_registry.get("dialogpt-medium"))
    items = [NLLItem(target="I am fine, thanks.", context=("how are you today?",))]
    via_hub, via_path = engine.score(items)[0], local.score(items)[0]
    assert math.isfinite(via_hub.nll)
    assert_same(via_hub, via_path)          # the same checkpoint, through the hub-id path


def test_hub_snapshot_without_marker_is_not_a_stand_in(stand_ins, hub_cache):
    snap = lay_out_as_hub_cache(stand_ins / "gpt2", hub_cache, "microsoft/DialoGPT-medium")
    (snap / MARKER).unlink()
    assert load_model(_hub_config()).stand_in is False


def test_missing_hub_id_fails_fast_offline(hub_cache):
    with pytest.raises(OSError):
        load_model(_hub_config("microsoft/DialoGPT-large"))
