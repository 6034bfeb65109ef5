"""Per-variant statistics of the robustness battery: how a scorer's scores on the variants of
:mod:`dialscore.evals.robustness` compare with its scores on the original responses.

Scores are "higher = better": pass NLLs negated. `variant_stats(original, variant, kind)` pairs
the two score sequences by position (unequal lengths raise ValueError) and leaves out, counting
them in `n_missing`, the pairs where either score is None or not finite (an empty variant, a
failed request). Over the `n` pairs kept it reports the variant scores' mean and population
standard deviation (`mean_std`), the share of variant scores within one standard deviation of
their mean (bounds included), the original scores' mean and population standard deviation,
Pearson's r and Spearman's rho of the original against the variant scores
(:func:`dialscore.evals.stats.pearson`, :func:`dialscore.evals.stats.spearman`), and the share of
pairs where the variant scored strictly higher than the original (`beat_share`), ties reported
apart (`tie_share`). `category` is the kind's category in `robustness.CATEGORIES`, None for
another kind (such as "original"). With no pair kept every statistic is None; a correlation is
None too with fewer than two pairs or a constant side.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from dialscore.evals.robustness import CATEGORIES
from dialscore.evals.stats import pearson, spearman


def _finite(x: float | None) -> bool:
    return x is not None and math.isfinite(x)


def mean_std(values: Sequence[float]) -> tuple[float | None, float | None]:
    """Mean and population standard deviation (None for no values)."""
    if not values:
        return None, None
    mean = math.fsum(values) / len(values)
    return mean, math.sqrt(math.fsum((v - mean) ** 2 for v in values) / len(values))


@dataclass(frozen=True)
class VariantStats:
    """Statistics of one variant against the originals (higher score = better)."""

    kind: str
    category: str | None
    n: int
    n_missing: int
    mean: float | None
    std: float | None
    within_1sd: float | None
    original_mean: float | None
    original_std: float | None
    pearson: float | None
    spearman: float | None
    beat_share: float | None
    tie_share: float | None

    def as_row(self) -> dict[str, object]:
        return dict(self.__dict__)


def variant_stats(original: Sequence[float | None], variant: Sequence[float | None],
                  kind: str = "") -> VariantStats:
    """Compare variant scores with the originals, pair by pair. Pairs where either score is
    None or not finite (an empty variant, a failed request) are left out and counted in
    `n_missing`. Scores are higher = better (negate NLLs)."""
    if len(original) != len(variant):
        raise ValueError(f"{len(original)} original scores but {len(variant)} variant scores")
    pairs = [(float(o), float(v)) for o, v in zip(original, variant) if _finite(o) and _finite(v)]
    xs, ys = [o for o, _ in pairs], [v for _, v in pairs]
    mean, std = mean_std(ys)
    o_mean, o_std = mean_std(xs)
    n = len(pairs)
    return VariantStats(
        kind=kind, category=CATEGORIES.get(kind), n=n, n_missing=len(original) - n,
        mean=mean, std=std,
        within_1sd=(sum(abs(v - mean) <= std for v in ys) / n) if n else None,
        original_mean=o_mean, original_std=o_std,
        pearson=pearson(xs, ys), spearman=spearman(xs, ys),
        beat_share=(sum(v > o for o, v in pairs) / n) if n else None,
        tie_share=(sum(v == o for o, v in pairs) / n) if n else None,
    )
