"""Paired comparison of two models on the same CEDAR pairs (the paper's Figures 5 and 6 compare
BART-base with BART-large, and models before and after fine-tuning).

Pairs are matched by (setting, pair_id). The accuracy difference (model A minus model B) gets a
percentile interval from a dialogue-level paired bootstrap: each replicate draws dialogues
(dataset, dialogue_id) with replacement and recomputes both accuracies on the same drawn pairs;
the two-sided p-value is that of the bootstrap test of "no difference" (twice the smaller share of
replicate differences on either side of 0, at most 1). Needs numpy (the `reports` extra).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from dialscore.probes.report import ScoredPair

__all__ = ["PairedComparison", "compare_models"]


@dataclass(frozen=True)
class PairedComparison:
    model_a: str
    model_b: str
    n_pairs: int
    n_dialogues: int
    accuracy_a: float
    accuracy_b: float
    difference: float
    ci_low: float
    ci_high: float
    p_value: float


def compare_models(pairs: Sequence[ScoredPair], model_a: str, model_b: str, seed: int = 0,
                   n_boot: int = 2000, level: float = 0.95) -> PairedComparison:
    """Compare `model_a` with `model_b` on the pairs both scored (see the module docstring).
    Raises ValueError when they share no pair."""
    import numpy as np

    a = {(p.setting, p.pair_id): p for p in pairs if p.model == model_a}
    b = {(p.setting, p.pair_id): p for p in pairs if p.model == model_b}
    shared = sorted(set(a) & set(b))
    if not shared:
        raise ValueError(f"models {model_a!r} and {model_b!r} share no scored pair")
    index: dict[tuple[str, str], int] = {}
    for k in shared:
        index.setdefault((a[k].dataset, a[k].dialogue_id), len(index))
    n = np.zeros(len(index))
    hits_a = np.zeros(len(index))
    hits_b = np.zeros(len(index))
    for k in shared:
        c = index[(a[k].dataset, a[k].dialogue_id)]
        n[c] += 1
        hits_a[c] += a[k].correct
        hits_b[c] += b[k].correct
    rng = np.random.Generator(np.random.PCG64(seed))
    draws = rng.integers(0, len(index), size=(n_boot, len(index)))
    diffs = (hits_a[draws].sum(axis=1) - hits_b[draws].sum(axis=1)) / n[draws].sum(axis=1)
    alpha = (1.0 - level) / 2
    lo, hi = np.quantile(diffs, [alpha, 1.0 - alpha])
    p = min(1.0, 2 * min(float((diffs <= 0).mean()), float((diffs >= 0).mean())))
    acc_a, acc_b = hits_a.sum() / n.sum(), hits_b.sum() / n.sum()
    return PairedComparison(model_a, model_b, len(shared), len(index), float(acc_a), float(acc_b),
                            float(acc_a - acc_b), float(lo), float(hi), p)
