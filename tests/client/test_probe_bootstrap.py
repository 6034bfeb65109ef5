"""Dialogue-level bootstrap of the CEDAR accuracy and the paired comparison of two models."""

from __future__ import annotations

import pytest

from dialscore.probes.compare import compare_models
from dialscore.probes.metrics import ScoredPair, bootstrap_ci, cluster_bootstrap_ci, summarize


def _pair(model, dialogue, k, correct):
    """Explanation k of `dialogue`, its negation, scored by `model`; the row id names the model
    as a run's does."""
    return ScoredPair(pair_id=f"{model}|inference|{dialogue}|e{k}|negation", model=model,
                      setting="inference", dataset="D",
                      dialogue_id=dialogue, explanation_index=k, dimension="cause",
                      corruption="negation", category="logical", valid_text="v",
                      corrupted_text="c", nll_valid=1.0, nll_corrupted=2.0 if correct else 0.5)


def test_clustered_outcomes_widen_the_interval():
    # 40 dialogues of 6 pairs each, all pairs of a dialogue alike (as when they share an NLL):
    # the dialogue-level interval is as wide as with 40 outcomes, far wider than with 240.
    outcomes, clusters = [], []
    for d in range(40):
        outcomes += [d % 2 == 0] * 6
        clusters += [d] * 6
    lo_c, hi_c = cluster_bootstrap_ci(outcomes, clusters, seed=1)
    lo_p, hi_p = bootstrap_ci(outcomes, seed=1)
    assert (hi_c - lo_c) > 1.8 * (hi_p - lo_p)
    # Singleton clusters: the same distribution as the pair-level bootstrap.
    lo_s, hi_s = cluster_bootstrap_ci(outcomes, list(range(240)), seed=1)
    assert abs((hi_s - lo_s) - (hi_p - lo_p)) < 0.03
    assert cluster_bootstrap_ci([], [], seed=0) is None


def test_summary_resamples_dialogues():
    pairs = [_pair("m", f"d{d}", k, d % 2 == 0) for d in range(30) for k in range(6)]
    (cat, corr) = [g for g in summarize(pairs, seed=0) if g.dataset == "D"]
    want = cluster_bootstrap_ci([p.correct for p in pairs], [("D", p.dialogue_id) for p in pairs],
                                seed=0)
    assert cat.accuracy == 0.5 and cat.ci_high - cat.ci_low > 0.2
    assert want is not None and cat.ci_high - cat.ci_low == pytest.approx(want[1] - want[0], abs=0.06)


def test_paired_comparison_on_shared_pairs():
    pairs = []
    for d in range(40):
        for k in range(3):
            pairs.append(_pair("large", f"d{d}", k, True))
            pairs.append(_pair("base", f"d{d}", k, d % 4 != 0))  # wrong on every 4th dialogue
    pairs.append(_pair("large", "extra", 0, True))  # scored by one model only: left out
    c = compare_models(pairs, "large", "base", seed=0)
    assert (c.n_pairs, c.n_dialogues) == (120, 40)
    assert c.accuracy_a == 1.0 and c.accuracy_b == 0.75 and c.difference == pytest.approx(0.25)
    assert 0 < c.ci_low < 0.25 < c.ci_high and c.p_value < 0.01
    same = compare_models(pairs, "base", "base", seed=0)
    assert same.difference == 0 and same.p_value == 1.0
    with pytest.raises(ValueError, match="share no scored pair"):
        compare_models(pairs, "large", "nope")


def test_tables_nest_category_then_dataset_with_pooled_last():
    from dialscore.probes.tables import format_tables

    pairs = [_pair("m", f"d{d}", 0, True) for d in range(4)]
    pairs += [ScoredPair(**{**p.__dict__, "dataset": "E", "pair_id": p.pair_id + "e"}) for p in pairs]
    text = format_tables(summarize(pairs, seed=0))
    top, sub = text.splitlines()[1], text.splitlines()[2]
    assert top.index("logical") < top.index("complete") < top.index("pooled")
    # datasets under each category, the pooled block's sub-columns are the categories
    assert sub.index("D") < sub.index("E") < sub.rindex("logical")
