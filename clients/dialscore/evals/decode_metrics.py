"""DECODE contradiction detection metrics, for paired gold dialogues and predictions.

Metrics (`decode_metrics`), with "contradiction" as the positive class:
- accuracy of the 2-way label;
- strict accuracy: the label right and the predicted evidence set equal to the gold one; for a
  gold non-contradiction that means predicting non-contradiction with no evidence at all (the
  evidence a prediction reports counts as reported, whatever its label);
- supporting-evidence precision, recall and F1 over (dialogue, earlier turn) pairs, pooled over
  all dialogues given (micro-averaged; F1 = 2tp / (2tp + fp + fn));
  these `strict_accuracy` / `evidence_*` figures are the *pooled* convention. The paper's
  evidence (Eq. 3) ranges over earlier turns of the last speaker only, so the *paper-scope*
  figures (`*_paper`) count only the same-speaker candidate pairs of gold contradictions: gold
  and predicted evidence are both restricted to the earlier turns by the last speaker, over the
  dialogues labelled contradiction; `strict_accuracy_paper` needs the label right and, for a gold
  contradiction, the restricted evidence sets equal. `n_other_speaker_gold_evidence` counts the
  gold evidence turns by another speaker (which a structured detector can never return).
  A mode that returns no evidence (unstructured) has neither: those fields are "n/a" (:data:`NA`);
- precision, recall and F1 of the label, ROC AUC of the probability, and the fire rate (share
  predicted contradiction), overall and per group (by default the record's `auxiliary.source`).
A ratio whose denominator is zero is None rather than 0.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dialscore.evals.decode import DecodeDialogue, Prediction
from dialscore.evals.stats import prf, roc_auc


@dataclass(frozen=True)
class DecodeMetrics:
    n: int
    n_gold_contradiction: int
    n_predicted_contradiction: int
    accuracy: float | None
    strict_accuracy: float | None | str
    evidence_precision: float | None | str
    evidence_recall: float | None | str
    evidence_f1: float | None | str
    strict_accuracy_paper: float | None | str
    evidence_precision_paper: float | None | str
    evidence_recall_paper: float | None | str
    evidence_f1_paper: float | None | str
    n_other_speaker_gold_evidence: int
    precision: float | None
    recall: float | None
    f1: float | None
    roc_auc: float | None
    fire_rate: float | None
    fire_rate_by_group: Mapping[str, float] = field(default_factory=dict)
    n_by_group: Mapping[str, int] = field(default_factory=dict)

    def as_row(self) -> dict[str, object]:
        """The scalar fields as one report row (per-group fire rates as `fire_rate[GROUP]`)."""
        row: dict[str, object] = {k: v for k, v in self.__dict__.items()
                                  if not isinstance(v, Mapping)}
        row.update({f"fire_rate[{g}]": r for g, r in self.fire_rate_by_group.items()})
        return row


NO_GROUP = "(none)"

#: What an evidence figure reads for a mode that returns no evidence (the paper prints "-").
NA = "n/a"

_METRIC_ORDER = ("n", "n_gold_contradiction", "n_predicted_contradiction", "accuracy",
                 "strict_accuracy", "evidence_precision", "evidence_recall", "evidence_f1",
                 "strict_accuracy_paper", "evidence_precision_paper", "evidence_recall_paper",
                 "evidence_f1_paper", "n_other_speaker_gold_evidence",
                 "precision", "recall", "f1", "roc_auc", "fire_rate")


def side_by_side(metrics: Mapping[str, Mapping[str, DecodeMetrics]]) -> list[dict[str, Any]]:
    """Table rows of `metrics[set][mode]`: one row per metric (the fixed ones first, then the
    per-group fire rates), one column per "set/mode", so the modes stand side by side."""
    columns = [(s, m) for s, by_mode in metrics.items() for m in by_mode]
    names = list(_METRIC_ORDER)
    for s, m in columns:
        for key in metrics[s][m].as_row():
            if key not in names:
                names.append(key)
    return [{"metric": name, **{f"{s}/{m}": metrics[s][m].as_row().get(name) for s, m in columns}}
            for name in names]


def decode_metrics(gold: Sequence[DecodeDialogue], predictions: Sequence[Prediction],
                   groups: Sequence[str | None] | None = None,
                   returns_evidence: bool = True) -> DecodeMetrics:
    """All DECODE metrics for paired gold dialogues and predictions (see the module docstring).

    `returns_evidence=False` (the unstructured mode) makes every strict-accuracy and evidence
    figure :data:`NA`.

    `groups` overrides each dialogue's `group` for the per-group fire rate; None becomes
    "(none)".
    """
    if len(gold) != len(predictions):
        raise ValueError(f"{len(gold)} dialogues but {len(predictions)} predictions")
    if groups is not None and len(groups) != len(gold):
        raise ValueError(f"{len(gold)} dialogues but {len(groups)} groups")
    n = len(gold)
    tp = fp = fn = 0
    ev_tp = ev_fp = ev_fn = 0
    pe_tp = pe_fp = pe_fn = 0
    correct = strict = strict_paper = other_speaker = 0
    fired: dict[str, list[bool]] = {}
    for i, (g, p) in enumerate(zip(gold, predictions)):
        label_ok = g.is_contradiction == p.is_contradiction
        correct += label_ok
        strict += label_ok and p.evidence == g.evidence
        tp += g.is_contradiction and p.is_contradiction
        fp += (not g.is_contradiction) and p.is_contradiction
        fn += g.is_contradiction and not p.is_contradiction
        ev_tp += len(p.evidence & g.evidence)
        ev_fp += len(p.evidence - g.evidence)
        ev_fn += len(g.evidence - p.evidence)
        same = frozenset(t.id for t in g.turns[:-1] if t.speaker == g.last.speaker)
        other_speaker += len(g.evidence - same)
        if g.is_contradiction:
            g_same, p_same = g.evidence & same, p.evidence & same
            pe_tp += len(p_same & g_same)
            pe_fp += len(p_same - g_same)
            pe_fn += len(g_same - p_same)
            strict_paper += label_ok and p_same == g_same
        else:
            strict_paper += label_ok
        key = groups[i] if groups is not None else g.group
        fired.setdefault(NO_GROUP if key is None else str(key), []).append(p.is_contradiction)
    precision, recall, f1 = prf(tp, fp, fn)
    ev_p, ev_r, ev_f1 = prf(ev_tp, ev_fp, ev_fn)
    pe_p, pe_r, pe_f1 = prf(pe_tp, pe_fp, pe_fn)
    evidence: dict[str, float | None | str] = {
        "strict_accuracy": strict / n if n else None,
        "evidence_precision": ev_p, "evidence_recall": ev_r, "evidence_f1": ev_f1,
        "strict_accuracy_paper": strict_paper / n if n else None,
        "evidence_precision_paper": pe_p, "evidence_recall_paper": pe_r, "evidence_f1_paper": pe_f1}
    if not returns_evidence:
        evidence = {k: NA for k in evidence}
    n_fired = sum(p.is_contradiction for p in predictions)
    return DecodeMetrics(
        n=n,
        n_gold_contradiction=sum(g.is_contradiction for g in gold),
        n_predicted_contradiction=n_fired,
        accuracy=correct / n if n else None,
        **evidence,  # type: ignore[arg-type]
        n_other_speaker_gold_evidence=other_speaker,
        precision=precision, recall=recall, f1=f1,
        roc_auc=roc_auc([g.is_contradiction for g in gold], [p.probability for p in predictions])
        if n else None,
        fire_rate=n_fired / n if n else None,
        fire_rate_by_group={k: sum(v) / len(v) for k, v in sorted(fired.items())},
        n_by_group={k: len(v) for k, v in sorted(fired.items())},
    )
