"""Shared-prefix reuse and reduced precision in the NLL engine (issue 7).

With ``prefix_reuse`` on (the default) the engine computes shared work once: a decoder-only group's
common token prefix runs once and its key/value cache is expanded across the continuations; an
encoder-decoder model encodes each distinct source once. These tests check that the numbers are
those of plain scoring (reuse off, and each item alone) for mixed batches, that the reuse really
happens (forward-pass hooks, BatchStats), and that bf16 stays within a documented tolerance.

Weights are re-initialised at std 0.3 so that NLLs vary by token and position (at the stand-ins'
small default init every token costs about log(vocab) and a wrong position would go unnoticed).
"""

from __future__ import annotations

import random

import pytest
import torch

from dialscore_server.scheduling.planner import share_prefixes
from dialscore_server.checkpoints.loading import LoadedModel, load_model
from dialscore_server.nll.engine.encoding import EncodedItem, NLLItem
from dialscore_server.nll.engine.engine import NLLEngine
from model_helpers import input_shapes
from dialscore_server.checkpoints.standins import reinit_

TOL = 1e-4
#: bf16 vs fp32 on the re-initialised gpt2 stand-in: per-item NLL within this many nats (measured
#: worst case 0.04, mean 0.012, at std 0.3, where per-item NLLs span 7-13 nats; see docs/benchmarks/precision.md).
BF16_TOL = 0.1


@pytest.fixture(scope="module")
def models(stand_in_registry) -> dict[str, LoadedModel]:
    out = {}
    for name in ("dialogpt-medium", "bart-base"):
        lm = load_model(stand_in_registry.get(name))
        reinit_(lm.model, 0.3, seed=1)
        out[name] = lm
    return out


def engine(models, name: str, **kw) -> NLLEngine:
    lm = models[name]
    return NLLEngine(lm.config, loaded=lm, **kw)


def mixed_items(vocab: int, seed: int) -> list[EncodedItem]:
    """Probe- and rerank-shaped decoder-only items, shuffled together:

    * groups of 1 to 9 targets after one source (sources 1-90 tokens, targets 1-20): padding in
      the prefix pass (different prefix lengths) and in the continuation pass (different
      continuation lengths);
    * targets that share their first tokens (a valid explanation and its negation), so a prefix
      runs into the targets;
    * a source that extends another one (the same history, one more turn);
    * exact duplicates; and unshared items.
    """
    rng = random.Random(seed)

    def ids(k):
        return tuple(rng.randrange(vocab) for _ in range(k))

    items: list[EncodedItem] = []
    for size in (1, 2, 3, 7, 9):
        src = ids(rng.randint(20, 90))
        shared_start = ids(8)
        for k in range(size):
            tgt = shared_start + ids(rng.randint(1, 12)) if k % 2 else ids(rng.randint(1, 20))
            items.append(EncodedItem(src, tgt, False))
        items.append(EncodedItem(src + ids(5), ids(4), False))  # one more turn
    short = ids(3)  # shares fewer tokens than min_shared_prefix: never grouped
    items += [EncodedItem(short, ids(rng.randint(1, 6)), False) for _ in range(3)]
    items += [EncodedItem(ids(rng.randint(1, 40)), ids(rng.randint(1, 10)), False) for _ in range(6)]
    items += [items[0], items[5]]  # duplicates
    rng.shuffle(items)
    return items


def sequences(items: list[EncodedItem]) -> list[tuple[int, ...]]:
    """What the engine groups by shared prefix: each item's source + target tokens."""
    return [e.source_ids + e.target_ids for e in items]


def assert_same(a, b, tol=TOL):
    assert a.token_ids == b.token_ids and a.num_tokens == b.num_tokens
    assert a.source_tokens == b.source_tokens and a.truncated == b.truncated
    assert a.nll == pytest.approx(b.nll, abs=tol)
    assert max(abs(x - y) for x, y in zip(a.token_nlls, b.token_nlls)) < tol


@pytest.mark.parametrize("budget", [10**6, 300, 40], ids=["one-batch", "budget-300", "budget-40"])
def test_causal_reuse_equals_plain(models, budget):
    """Reuse on == reuse off == each item alone, to 1e-4, in input order, for one large batch and
    for budgets that split groups over several batches and continuation passes."""
    on = engine(models, "dialogpt-medium", token_budget=budget)
    off = engine(models, "dialogpt-medium", token_budget=budget, prefix_reuse=False)
    items = mixed_items(on.model.config.vocab_size, seed=budget % 97)
    got, stats = on.score_encoded(items)
    plain, plain_stats = off.score_encoded(items)
    for a, b in zip(got, plain):
        assert_same(a, b)
    if budget == 10**6:
        for item, a in zip(items[:12], got):
            assert_same(a, off.score_encoded([item])[0][0])
    # Reuse happened, and the stats count what was computed.
    assert stats.shared_groups >= 4 and stats.real_tokens < plain_stats.real_tokens
    assert stats.item_tokens == plain_stats.item_tokens == plain_stats.real_tokens
    assert stats.reused_tokens == stats.item_tokens - stats.real_tokens > 0
    assert stats.padded_tokens >= stats.real_tokens
    assert sum(stats.batch_sizes) == stats.items == len(items)
    assert stats.forward_passes > stats.batches  # a shared batch is a prefix + continuation pass


def test_grouping_and_token_accounting(models):
    """Groups need two items and min_shared_prefix shared tokens; a group's prefix stops one token
    short of its shortest item; real tokens = item tokens - Σ (k - 1) × prefix."""
    eng = engine(models, "dialogpt-medium", min_shared_prefix=16)
    src = tuple(range(100, 140))  # 40 tokens
    items = [
        EncodedItem(src, (7, 8, 9), False),
        EncodedItem(src, (7, 8, 10, 11), False),   # shares src + (7, 8)
        EncodedItem(src, (12,), False),
        EncodedItem(src[:10], (5,), False),        # 10 shared tokens: below the minimum
        EncodedItem((1, 2, 3), (4,), False),       # alone
        EncodedItem(src[:17], (6,), False),        # 17 shared tokens, but only 18 long
    ]
    groups, alone = share_prefixes(sequences(items), eng.min_shared_prefix)
    assert alone == [3, 4, 5]
    by_items = {frozenset(g.items): g.length for g in groups}
    # Best split: {0, 1, 2} at 40 tokens (saves 80) plus nothing else, or {0,1,2,5} at 17 (saves
    # 51): the DP keeps the larger saving.
    assert by_items == {frozenset({0, 1, 2}): 40}
    results, stats = eng.score_encoded(items)
    assert stats.shared_groups == 1 and stats.shared_items == 3 and stats.shared_prefix_tokens == 40
    assert stats.real_tokens == sum(e.cost for e in items) - 2 * 40
    off = engine(models, "dialogpt-medium", prefix_reuse=False)
    for a, b in zip(results, off.score_encoded(items)[0]):
        assert_same(a, b)
    # Duplicates: the prefix is the whole item but one token.
    dup = [EncodedItem(src, (7, 8, 9), False)] * 3
    (g,), alone = share_prefixes(sequences(dup), eng.min_shared_prefix)
    assert g.length == len(src) + 2 and alone == []
    for a, b in zip(eng.score_encoded(dup)[0], off.score_encoded(dup)[0]):
        assert_same(a, b)


def test_prefix_runs_once_per_group(models):
    """Forward-pass hook: with reuse, the first pass holds one row per group (the prefixes), and the
    continuation pass only continuation tokens; the first target token (predicted by the prefix's
    last position) is still scored."""
    eng = engine(models, "dialogpt-medium")
    rng = random.Random(5)
    sources = [tuple(rng.randrange(5, 500) for _ in range(n)) for n in (30, 45, 60)]
    # Each target starts with its own token, so no item is a prefix of another (read from its pass).
    items = [EncodedItem(sources[k % 3], (500 + k,) + tuple(rng.randrange(5, 500) for _ in range(k % 5)),
                         False) for k in range(21)]
    with input_shapes(eng.model.base_model) as shapes:
        results, stats = eng.score_encoded(items)
    assert shapes[0] == (3, 60)                       # three prefixes, padded to the longest
    assert shapes[1] == (21, 5)                       # continuations only (targets of 1-5 tokens)
    assert stats.forward_passes == 2 and stats.batches == 1
    assert [r.num_tokens for r in results] == [len(e.target_ids) for e in items]
    off = engine(models, "dialogpt-medium", prefix_reuse=False)
    for a, b in zip(results, off.score_encoded(items)[0]):
        assert_same(a, b)


def test_reuse_through_score_with_text_items(models):
    """Callers change nothing: probe-shaped text items (one context, seven explanations) score the
    same through `score` with reuse on and off, and the context is shared."""
    on = engine(models, "dialogpt-medium")
    off = engine(models, "dialogpt-medium", prefix_reuse=False)
    ctx = ("Did you get the tickets?", "Only two, in the back row.", "Back row is fine.", "Why?")
    targets = ["Getting tickets causes the speaker feels glad",
               "Getting tickets does not cause the speaker feels glad",
               "the speaker feels glad causes Getting tickets",
               "glad feels speaker the causes tickets Getting",
               "Getting causes speaker glad", "tickets Getting causes the glad feels speaker",
               "The concert hall being downtown enables the tickets to sell out"]
    items = [NLLItem(context=ctx, target=t) for t in targets]
    for a, b in zip(on.score(items), off.score(items)):
        assert_same(a, b)
    _, stats = on.score_encoded([on.encode(i) for i in items])
    assert stats.shared_groups >= 1 and stats.reused_tokens > 0


@pytest.mark.parametrize("budget", [10**6, 64], ids=["one-batch", "budget-64"])
def test_seq2seq_reuse_on_off(models, budget):
    """Encoder-decoder: the shared "prefix" is the encoder source. Reuse on and off agree to 1e-4;
    with reuse each distinct source of a batch goes through the encoder once, without it every row
    is encoded on its own."""
    rng = random.Random(11)
    sources = [tuple(rng.randrange(5, 600) for _ in range(n)) for n in (5, 17, 17, 40)]
    items = [EncodedItem(sources[k % 4], tuple(rng.randrange(5, 600) for _ in range(1 + k % 7)), False)
             for k in range(24)]
    rng.shuffle(items)
    counts = {}
    for reuse in (True, False):
        eng = engine(models, "bart-base", token_budget=budget, prefix_reuse=reuse)
        rows = []
        hook = eng.model.get_encoder().register_forward_hook(
            lambda mod, args, kwargs, out: rows.append(kwargs["input_ids"].shape[0]), with_kwargs=True)
        try:
            counts[reuse] = (eng.score_encoded(items), sum(rows))
        finally:
            hook.remove()
    (on, on_stats), on_rows = counts[True]
    (off, off_stats), off_rows = counts[False]
    for a, b in zip(on, off):
        assert_same(a, b)
    assert off_rows == len(items)
    if budget == 10**6:
        assert on_rows == len(set(sources))
        assert on_stats.reused_tokens == sum(len(e.source_ids) for e in items) - sum(
            len(s) for s in set(sources))
    else:
        assert on_rows < off_rows
    assert off_stats.reused_tokens == 0 and off_stats.real_tokens == off_stats.item_tokens


def test_bf16_close_to_fp32(stand_in_registry, models):
    """bf16 mode (registry dtype) loads, runs with prefix reuse on and off, projects in float32, and
    stays within BF16_TOL nats per item of float32 on the re-initialised stand-in."""
    fp32 = models["dialogpt-medium"]
    cfg = fp32.config.model_copy(update={"dtype": "bfloat16"})
    lm = load_model(cfg)
    assert next(lm.model.parameters()).dtype == torch.bfloat16
    lm.model.load_state_dict({k: v.to(torch.bfloat16) for k, v in fp32.model.state_dict().items()})
    bf16 = NLLEngine(cfg, loaded=lm)
    ref = NLLEngine(fp32.config, loaded=fp32)
    items = mixed_items(fp32.model.config.vocab_size, seed=3)
    want = ref.score_encoded(items)[0]
    got, stats = bf16.score_encoded(items)
    plain = NLLEngine(cfg, loaded=lm, prefix_reuse=False).score_encoded(items)[0]
    assert stats.shared_groups > 0
    head = bf16.projection.weight_fp32
    assert head is not None and head.dtype == torch.float32
    diffs = [abs(a.nll - b.nll) for a, b in zip(got, want)]
    assert max(diffs) < BF16_TOL
    # Reuse does not change bf16 numbers beyond bf16's own noise either.
    assert max(abs(a.nll - b.nll) for a, b in zip(got, plain)) < BF16_TOL


def test_serving_option_reaches_engine():
    """`serving.prefix_reuse` is a validated serving option (default on)."""
    from dialscore_server.contract.options import ServingOptions

    assert ServingOptions().prefix_reuse is True
    assert ServingOptions.model_validate({"prefix_reuse": False}).prefix_reuse is False
    with pytest.raises(Exception):
        ServingOptions.model_validate({"prefix_reuse": "sometimes"})


@pytest.mark.parametrize("name", ["dialogpt-medium", "bart-base"])
def test_positions_count_what_a_call_computes(models, name):
    """`NLLEngine.positions` (what the serving sizes chunks and batches by) is the number of
    positions the call really computes when each source's items are adjacent and share nothing
    beyond the source: the source once per run of items, then each target; with reuse off (or a
    source below min_shared_prefix) every item computes its whole input."""
    rng = random.Random(4)
    vocab = models[name].model.config.vocab_size
    items = []
    for n_src, size in ((30, 7), (45, 1), (60, 4)):
        src = tuple(rng.randrange(5, vocab) for _ in range(n_src))
        firsts = rng.sample(range(5, vocab), size)  # targets differ from their first token on
        items += [EncodedItem(src, (f,) + tuple(rng.randrange(5, vocab) for _ in range(k % 6)),
                              False) for k, f in enumerate(firsts)]
    eng = engine(models, name)
    positions = [eng.positions(e, items[k - 1] if k else None) for k, e in enumerate(items)]
    _, stats = eng.score_encoded(items)
    assert sum(positions) == stats.real_tokens < stats.item_tokens
    off = engine(models, name, prefix_reuse=False)
    plain = [off.positions(e, items[k - 1] if k else None) for k, e in enumerate(items)]
    assert sum(plain) == off.score_encoded(items)[1].real_tokens == stats.item_tokens
    short = [EncodedItem((7,) * 5, (8 + k,), False) for k in range(3)]
    if name == "dialogpt-medium":  # a 5-token source is not shared by a decoder-only model
        assert [eng.positions(e, short[k - 1] if k else None) for k, e in enumerate(short)] == [6] * 3
