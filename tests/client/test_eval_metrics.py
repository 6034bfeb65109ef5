"""Metric arithmetic on hand-made rankings and labels (MuTual, DECODE) and the report writers."""

from __future__ import annotations

import csv
import json
import math

import pytest

from dialscore.evals.decode import DecodeDialogue, Prediction
from dialscore.evals.decode_metrics import decode_metrics
from dialscore.evals.stats import average_ranks, prf, roc_auc
from dialscore.types import Turn
from dialscore.evals.mutual import (Ranking, evaluate_mutual, format_ranked, mutual_metrics,
                                  rank_options, write_ranked)
from dialscore.reporting.rows import write_csv, write_json, write_jsonl
from dialscore.reporting.tables import format_table

# --- MuTual ranking --------------------------------------------------------------------------


def test_rank_options_orders_by_score_higher_first():
    r = rank_options([0.1, 0.7, 0.3, 0.5], gold=3)
    assert r.order == (1, 3, 2, 0)
    assert r.letters() == ("B", "D", "C", "A")
    assert r.gold_rank == 2


def test_ties_are_broken_against_the_gold_option():
    # All four equal: the gold option goes last, the others keep their option order.
    assert rank_options([1.0, 1.0, 1.0, 1.0], gold=0).order == (1, 2, 3, 0)
    assert rank_options([1.0, 1.0, 1.0, 1.0], gold=0).gold_rank == 4
    # Gold tied with one other for first place: it ranks second, not first.
    r = rank_options([0.2, 0.9, 0.9, 0.1], gold=1)
    assert r.order == (2, 1, 0, 3) and r.gold_rank == 2
    # Ties that do not involve the gold option keep the option order.
    assert rank_options([0.5, 0.5, 0.9, 0.1], gold=2).order == (2, 0, 1, 3)


def test_nll_is_ranked_by_the_caller_negating_it():
    nll = [2.3, 1.1, 3.0, 1.9]
    assert rank_options([-x for x in nll], gold=1).gold_rank == 1


def test_rank_options_rejects_nan_and_a_bad_gold():
    with pytest.raises(ValueError, match="NaN"):
        rank_options([0.1, math.nan, 0.2, 0.3], gold=0)
    with pytest.raises(ValueError, match="out of range"):
        rank_options([0.1, 0.2], gold=2)


def test_recall_at_k_and_mrr_by_hand():
    rankings = [
        rank_options([0.9, 0.1, 0.2, 0.3], gold=0),  # rank 1
        rank_options([0.9, 0.8, 0.2, 0.3], gold=1),  # rank 2
        rank_options([0.9, 0.8, 0.7, 0.3], gold=3),  # rank 4
        rank_options([0.5, 0.5, 0.5, 0.5], gold=2),  # all tied: rank 4
        rank_options([0.1, 0.2, 0.3, 0.4], gold=None),  # test split: not scored
    ]
    m = mutual_metrics(rankings)
    assert (m.n, m.n_scored, m.n_unscored) == (5, 4, 1)
    assert m.r_at_1 == pytest.approx(1 / 4)
    assert m.r_at_2 == pytest.approx(2 / 4)
    assert m.mrr == pytest.approx((1 + 1 / 2 + 1 / 4 + 1 / 4) / 4)
    assert m.as_row()["R@1"] == pytest.approx(0.25)


def test_metrics_without_any_gold_are_none_but_counted():
    m = mutual_metrics([rank_options([0.1, 0.2, 0.3, 0.4]) for _ in range(3)])
    assert (m.n, m.n_scored, m.n_unscored) == (3, 0, 3)
    assert m.r_at_1 is None and m.r_at_2 is None and m.mrr is None


def test_official_export_format(tmp_path):
    r = rank_options([0.2, 0.9, 0.9, 0.1], gold=2)
    assert format_ranked("dev_1", r) == "dev_1\tB\tC\tA\tD"
    path = write_ranked(tmp_path / "out" / "ranked.txt", ["dev_1", "test_7"],
                        [r, rank_options([0.0, 0.0, 1.0, 0.0])])
    assert path.read_text() == "dev_1\tB\tC\tA\tD\ntest_7\tC\tA\tB\tD\n"


def test_evaluate_mutual_checks_lengths():
    from dialscore.evals.mutual import MutualInstance

    inst = MutualInstance(id="x", article="m : hi", options=("m : a", "m : b"), answer=1)
    rankings, m = evaluate_mutual([inst], [[0.1, 0.2]])
    assert rankings == [Ranking(order=(1, 0), scores=(0.1, 0.2), gold=1)] and m.r_at_1 == 1.0
    with pytest.raises(ValueError, match="2 options but 3 scores"):
        evaluate_mutual([inst], [[0.1, 0.2, 0.3]])


# --- DECODE metrics --------------------------------------------------------------------------


def _dialogue(ident: str, contradiction: bool, evidence=(), group=None, n_turns=5):
    turns = tuple(Turn(id=i, speaker=str(i % 2), text=f"u{i}") for i in range(n_turns))
    return DecodeDialogue(id=ident, index=0, turns=turns, is_contradiction=contradiction,
                          evidence=frozenset(evidence), group=group)


def test_strict_accuracy_needs_label_and_exact_evidence():
    gold = [
        _dialogue("a", True, {0, 2}),
        _dialogue("b", True, {2}),
        _dialogue("c", False),
        _dialogue("d", False),
        _dialogue("e", True, {0}),
    ]
    pred = [
        Prediction(True, 0.9, frozenset({0, 2})),  # label and evidence exact: strict
        Prediction(True, 0.8, frozenset({0, 2})),  # label right, evidence too big: not strict
        Prediction(False, 0.1),                    # non-contradiction, no evidence: strict
        Prediction(False, 0.3, frozenset({2})),    # label right but evidence given: not strict
        Prediction(False, 0.4),                    # label wrong
    ]
    m = decode_metrics(gold, pred)
    assert m.accuracy == pytest.approx(4 / 5)
    assert m.strict_accuracy == pytest.approx(2 / 5)


def test_evidence_f1_over_dialogue_turn_pairs():
    gold = [_dialogue("a", True, {0, 2}), _dialogue("b", True, {2}), _dialogue("c", False)]
    pred = [Prediction(True, 0.9, frozenset({0})),          # tp 1, fn 1
            Prediction(True, 0.9, frozenset({0, 2})),       # tp 1, fp 1
            Prediction(True, 0.9, frozenset({1}))]          # fp 1
    m = decode_metrics(gold, pred)
    # tp = 2, fp = 2, fn = 1
    assert m.evidence_precision == pytest.approx(2 / 4)
    assert m.evidence_recall == pytest.approx(2 / 3)
    assert m.evidence_f1 == pytest.approx(2 * 2 / (2 * 2 + 2 + 1))
    # The same turn id in two dialogues is two different pairs.
    m2 = decode_metrics([_dialogue("a", True, {2}), _dialogue("b", True, {2})],
                        [Prediction(True, 0.9, frozenset({2})), Prediction(True, 0.9)])
    assert (m2.evidence_precision, m2.evidence_recall) == (1.0, 0.5)


def test_paper_scope_evidence_beside_pooled_and_other_speaker_count():
    # 5 turns, speakers 0 1 0 1 0: the last speaker's earlier turns are 0 and 2.
    gold = [_dialogue("a", True, {0, 1}),   # turn 1 is by the other speaker
            _dialogue("b", True, {2}),
            _dialogue("c", False)]
    pred = [Prediction(True, 0.9, frozenset({0})),       # pooled tp 1 fn 1; paper tp 1
            Prediction(True, 0.9, frozenset({0, 2})),    # pooled tp 1 fp 1; paper tp 1 fp 1
            Prediction(False, 0.2, frozenset({2}))]      # pooled fp 1; paper: not counted
    m = decode_metrics(gold, pred)
    assert (m.evidence_precision, m.evidence_recall) == (pytest.approx(2 / 4), pytest.approx(2 / 3))
    assert m.evidence_precision_paper == pytest.approx(2 / 3)
    assert m.evidence_recall_paper == 1.0
    assert m.evidence_f1_paper == pytest.approx(4 / 5)
    assert m.n_other_speaker_gold_evidence == 1
    # strict, pooled: none (a misses turn 1, b adds turn 0, c reports evidence) = 0;
    # paper scope: a right ({0} == {0} among turns 0, 2), b wrong, c right (label) = 2/3
    assert m.strict_accuracy == 0.0 and m.strict_accuracy_paper == pytest.approx(2 / 3)
    na = decode_metrics(gold, pred, returns_evidence=False)
    assert {na.strict_accuracy, na.evidence_f1, na.evidence_f1_paper, na.strict_accuracy_paper} == {"n/a"}
    assert na.accuracy == m.accuracy


def test_label_precision_recall_f1_and_fire_rate_per_group():
    gold = [_dialogue("a", True, {0}, "bot1"), _dialogue("b", False, (), "bot1"),
            _dialogue("c", False, (), "bot2"), _dialogue("d", True, {2}, "bot2"),
            _dialogue("e", False, (), None)]
    pred = [Prediction(True, 0.9), Prediction(True, 0.6), Prediction(False, 0.2),
            Prediction(False, 0.4), Prediction(False, 0.1)]
    m = decode_metrics(gold, pred)
    assert (m.precision, m.recall, m.f1) == (0.5, 0.5, 0.5)
    assert m.fire_rate == pytest.approx(2 / 5)
    assert m.fire_rate_by_group == {"(none)": 0.0, "bot1": 1.0, "bot2": 0.0}
    assert m.n_by_group == {"(none)": 1, "bot1": 2, "bot2": 2}
    # AUC from the probabilities: positives 0.9, 0.4; negatives 0.6, 0.2, 0.1 -> 5 of 6 pairs.
    assert m.roc_auc == pytest.approx(5 / 6)
    assert m.as_row()["fire_rate[bot1]"] == 1.0
    # Groups can be given by the caller instead.
    m3 = decode_metrics(gold, pred, groups=["x", "x", "y", "y", "y"])
    assert m3.fire_rate_by_group == {"x": 1.0, "y": 0.0}


def test_zero_denominators_give_none():
    assert prf(0, 0, 0) == (None, None, None)
    assert prf(0, 0, 3) == (None, 0.0, 0.0)
    m = decode_metrics([_dialogue("a", False)], [Prediction(False, 0.1)])
    assert m.precision is None and m.recall is None and m.f1 is None
    assert m.roc_auc is None  # one class only
    assert m.accuracy == 1.0 and m.strict_accuracy == 1.0


def test_roc_auc_against_known_values():
    # The classic example (scikit-learn's roc_auc_score docs give 0.75).
    assert roc_auc([False, False, True, True], [0.1, 0.4, 0.35, 0.8]) == pytest.approx(0.75)
    # A tie between a positive and a negative counts one half: (0.5 + 1 + 1 + 1) / 4.
    assert roc_auc([False, True, False, True], [0.5, 0.5, 0.2, 0.9]) == pytest.approx(0.875)
    assert roc_auc([True, False], [0.9, 0.1]) == 1.0
    assert roc_auc([True, False], [0.1, 0.9]) == 0.0
    assert roc_auc([True, True], [0.1, 0.9]) is None


def test_average_ranks_share_ties():
    assert average_ranks([10, 20, 20, 5]) == [2.0, 3.5, 3.5, 1.0]


def test_prediction_from_the_service_response():
    body = {"is_contradiction": True, "probability": 0.93,
            "evidence": [{"turn": 2, "probability": 0.91}, {"turn": 0, "probability": 0.2}]}
    p = Prediction.from_response(body)
    assert p.is_contradiction and p.probability == 0.93 and p.evidence == {0, 2}
    assert p.evidence_probabilities == {2: 0.91, 0: 0.2}
    assert Prediction.from_response(body, evidence_threshold=0.5).evidence == {2}
    quiet = Prediction.from_response({"is_contradiction": False, "probability": 0.1})
    assert quiet.evidence == set()


# --- report writers --------------------------------------------------------------------------


def test_report_writers_are_atomic_and_readable(tmp_path):
    rows = [{"variant": "jumbled", "mean": -3.21, "n": 200, "pearson": None},
            {"variant": "reversed", "mean": math.nan, "n": 3, "pearson": 0.5}]
    csv_path = write_csv(tmp_path / "r" / "stats.csv", rows)
    assert list(csv.DictReader(csv_path.open())) == [
        {"variant": "jumbled", "mean": "-3.21", "n": "200", "pearson": ""},
        {"variant": "reversed", "mean": "", "n": "3", "pearson": "0.5"}]
    json_path = write_json(tmp_path / "r" / "stats.json", rows)
    assert json.loads(json_path.read_text())[1] == {"variant": "reversed", "mean": None, "n": 3,
                                                    "pearson": 0.5}
    jl = write_jsonl(tmp_path / "r" / "rows.jsonl", rows)
    assert len(jl.read_text().splitlines()) == 2
    assert sorted(p.name for p in (tmp_path / "r").iterdir()) == ["rows.jsonl", "stats.csv",
                                                                  "stats.json"]  # no temp files
    table = format_table(rows, title="robustness")
    assert table.splitlines()[0] == "robustness"
    assert "-3.2100" in table and "nan" in table and " -" in table
    assert all(line == line.rstrip() for line in table.splitlines())


def test_atomic_write_keeps_the_old_file_when_serialisation_fails(tmp_path):
    path = write_json(tmp_path / "x.json", {"a": 1})
    with pytest.raises(TypeError):
        write_json(path, {"a": object()})
    assert json.loads(path.read_text()) == {"a": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["x.json"]
