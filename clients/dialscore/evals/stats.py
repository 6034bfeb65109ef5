"""Statistics of binary labels, of rankings and of paired scores, shared by the evaluations:
precision, recall and F1 from counts (:func:`prf`), ROC AUC by mid-ranks (:func:`roc_auc`), the
mid-ranks themselves (:func:`average_ranks`), and the correlations of two equal-length
sequences (unequal lengths raise ValueError): Pearson's r (:func:`pearson`, clamped to [-1, 1])
and Spearman's rho (:func:`spearman`, Pearson's r of the mid-ranks). A ratio whose denominator is
zero is None rather than 0, and so is a correlation with fewer than two pairs or a constant side.
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def prf(tp: int, fp: int, fn: int) -> tuple[float | None, float | None, float | None]:
    """Precision, recall and F1 from counts; each None when its denominator is zero."""
    precision = tp / (tp + fp) if tp + fp else None
    recall = tp / (tp + fn) if tp + fn else None
    f1 = 2 * tp / (2 * tp + fp + fn) if tp + fp + fn else None
    return precision, recall, f1


def roc_auc(labels: Sequence[bool], scores: Sequence[float]) -> float | None:
    """Area under the ROC curve: the probability that a random positive outscores a random
    negative, ties counting one half (Mann-Whitney U with mid-ranks). None with one class only.

        >>> roc_auc([False, False, True, True], [0.1, 0.4, 0.35, 0.8])
        0.75
    """
    if len(labels) != len(scores):
        raise ValueError(f"{len(labels)} labels but {len(scores)} scores")
    if any(math.isnan(float(s)) for s in scores):
        raise ValueError("NaN among the scores")
    n_pos = sum(bool(y) for y in labels)
    n_neg = len(labels) - n_pos
    if n_pos == 0 or n_neg == 0:
        return None
    ranks = average_ranks(scores)
    rank_sum = sum(r for r, y in zip(ranks, labels) if y)
    return (rank_sum - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)


def average_ranks(values: Sequence[float]) -> list[float]:
    """1-based ranks, ascending, ties sharing the mean of their ranks."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def pearson(x: Sequence[float], y: Sequence[float]) -> float | None:
    """Pearson's r; None with fewer than two pairs or a constant side."""
    if len(x) != len(y):
        raise ValueError(f"{len(x)} vs {len(y)} values")
    if len(x) < 2:
        return None
    mx, my = math.fsum(x) / len(x), math.fsum(y) / len(y)
    sxy = math.fsum((a - mx) * (b - my) for a, b in zip(x, y))
    sxx = math.fsum((a - mx) ** 2 for a in x)
    syy = math.fsum((b - my) ** 2 for b in y)
    if sxx == 0 or syy == 0:
        return None
    return max(-1.0, min(1.0, sxy / math.sqrt(sxx * syy)))


def spearman(x: Sequence[float], y: Sequence[float]) -> float | None:
    """Spearman's rho: Pearson's r of the mid-ranks (ties share their mean rank)."""
    if len(x) != len(y):
        raise ValueError(f"{len(x)} vs {len(y)} values")
    return pearson(average_ranks(x), average_ranks(y)) if len(x) >= 2 else None
