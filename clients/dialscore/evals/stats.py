"""Statistics of binary labels and of rankings, shared by the evaluations: precision, recall and
F1 from counts (:func:`prf`), ROC AUC by mid-ranks (:func:`roc_auc`), and the mid-ranks
themselves (:func:`average_ranks`, also the ranks of a Spearman correlation). A ratio whose
denominator is zero is None rather than 0.
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
