"""Metric arithmetic on hand-made NLL pairs: accuracy, ties, ΔNLL sign, grouping, bootstrap CI."""

from __future__ import annotations

import pytest

from dialscore.probes.corruptions import CATEGORY
from dialscore.probes.metrics import ScoredPair, accuracy, bootstrap_ci, mean_delta, summarize
from dialscore.probes.report import Report
from dialscore.probes.tables import format_tables


def pair(valid: float, corrupted: float, *, model="m", setting="attribution", dataset="DailyDialog",
         corruption="shuffle", n=[0]) -> ScoredPair:
    n[0] += 1
    return ScoredPair(pair_id=f"p{n[0]}", model=model, setting=setting, dataset=dataset,
                      dialogue_id=f"d{n[0]}", explanation_index=0, dimension="event",
                      corruption=corruption, category=CATEGORY[corruption], valid_text="v",
                      corrupted_text="c", nll_valid=valid, nll_corrupted=corrupted)


def test_accuracy_counts_ties_as_misses():
    pairs = [pair(1.0, 2.0), pair(2.0, 1.0), pair(1.5, 1.5), pair(0.5, 3.0)]
    assert [p.correct for p in pairs] == [True, False, False, True]
    assert accuracy(pairs) == 0.5
    assert accuracy([pair(2.0, 2.0)]) == 0.0
    assert accuracy([]) is None and mean_delta([]) is None


def test_delta_sign_positive_when_valid_preferred():
    assert pair(1.0, 3.5).delta == 2.5
    assert pair(3.0, 1.0).delta == -2.0
    assert mean_delta([pair(1.0, 3.0), pair(2.0, 1.0), pair(1.0, 1.0)]) == pytest.approx((2 - 1 + 0) / 3)


def test_grouping_by_dataset_category_and_corruption():
    pairs = [
        pair(1, 2, dataset="DailyDialog", corruption="shuffle"),      # complete, correct
        pair(2, 1, dataset="DailyDialog", corruption="reversed"),     # complete, miss
        pair(1, 3, dataset="DailyDialog", corruption="negation"),     # logical, correct
        pair(1, 1, dataset="MuTual", corruption="negation"),          # logical, tie
        pair(1, 4, dataset="MuTual", corruption="swapped"),           # logical, correct
        pair(5, 1, setting="inference", dataset="MuTual", corruption="swapped"),
        pair(1, 2, model="other", dataset="MuTual", corruption="swapped"),
    ]
    groups = {(g.model, g.setting, g.dataset, g.category, g.corruption): g for g in summarize(pairs, seed=1)}
    g = groups[("m", "attribution", "DailyDialog", "complete", "all")]
    assert (g.n, g.correct, g.accuracy, g.mean_delta) == (2, 1, 0.5, 0.0)
    g = groups[("m", "attribution", "MuTual", "logical", "all")]
    assert (g.n, g.correct, g.ties, g.accuracy, g.mean_delta) == (2, 1, 1, 0.5, 1.5)
    g = groups[("m", "attribution", "all", "logical", "all")]
    assert (g.n, g.correct, g.accuracy) == (3, 2, pytest.approx(2 / 3))
    assert g.mean_delta == pytest.approx((2 + 0 + 3) / 3)
    g = groups[("m", "attribution", "all", "logical", "negation")]
    assert (g.n, g.correct, g.ties) == (2, 1, 1)
    g = groups[("m", "inference", "all", "logical", "swapped")]
    assert (g.n, g.accuracy, g.mean_delta) == (1, 0.0, -4.0)
    assert groups[("other", "attribution", "all", "logical", "all")].accuracy == 1.0
    assert ("m", "inference", "all", "complete", "all") not in groups


def test_bootstrap_ci_is_seeded_and_sensible():
    outcomes = [True] * 70 + [False] * 30
    lo, hi = bootstrap_ci(outcomes, seed=3)
    assert (lo, hi) == bootstrap_ci(outcomes, seed=3)
    assert 0.58 < lo < 0.70 < hi < 0.80
    assert bootstrap_ci([True] * 10, seed=0) == (1.0, 1.0)
    assert bootstrap_ci([], seed=0) is None
    wide = bootstrap_ci([True, False] * 5, seed=0)
    narrow = bootstrap_ci([True, False] * 500, seed=0)
    assert wide[1] - wide[0] > narrow[1] - narrow[0]


def test_report_lookup_and_tables():
    pairs = [pair(1, 2, corruption=c) for c in ("shuffle", "dropped", "reversed", "swapped")]
    pairs.append(pair(3, 1, corruption="negation"))
    report = Report(pairs=pairs, groups=summarize(pairs, seed=0, n_boot=200),
                    models={"m": {"stand_in": True, "format_choices": {"why_turn": "Why?",
                                                                       "explanation_placement": "before_history"}}},
                    skipped=[{"corruption": "incorrect", "reason": "no invalid explanation", "count": 4}])
    assert report.metrics("m", "attribution", category="complete").accuracy == 1.0
    assert report.metrics("m", "attribution", category="logical").accuracy == 0.5
    assert report.metrics("m", "attribution", corruption="negation").mean_delta == -2.0
    with pytest.raises(KeyError):
        report.metrics("m", "inference", category="logical")
    text = report.table()
    assert "STAND-IN" in text and "Attribution probing" in text and "DailyDialog" in text
    assert "1.00 / +1.00" in text and "n=3" in text and "'Why?'" in text
    assert "incorrect: no invalid explanation x4" in text
    assert format_tables([]) == "\n"
