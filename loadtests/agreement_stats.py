"""Confidence intervals and a paired test for decision agreement (benchmarks only).

A reduced-precision mode *flips* a decision when it orders a pair differently from float32.
With a few hundred pairs and flip rates of a few percent, two modes' agreement figures differ by
a handful of pairs, so the benchmarks report:

* :func:`wilson_interval`: the Wilson score interval of a proportion (k flips of n), which stays
  inside [0, 1] and is sensible at k = 0, unlike the normal approximation;
* :func:`mcnemar_exact`: McNemar's exact test for two modes scored on the *same* pairs: only the
  pairs that exactly one of them flips carry information; under "both flip equally often" each
  such pair is equally likely to be either mode's, so the count is Binomial(b + c, 1/2).
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def wilson_interval(k: int, n: int, z: float = 1.959964) -> tuple[float, float]:
    """Two-sided Wilson score interval for the proportion k/n (95% at the default z).

    Returns (0.0, 1.0) for n = 0."""
    if n <= 0:
        return 0.0, 1.0
    if not 0 <= k <= n:
        raise ValueError("need 0 <= k <= n")
    p = k / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def mcnemar_exact(b: int, c: int) -> float:
    """Two-sided exact McNemar p-value: b pairs flipped by mode A only, c by mode B only.

    p = min(1, 2 * P(X <= min(b, c))) for X ~ Binomial(b + c, 1/2); 1.0 when b + c = 0."""
    if b < 0 or c < 0:
        raise ValueError("counts must be non-negative")
    n = b + c
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(min(b, c) + 1)) / 2 ** n
    return min(1.0, 2 * tail)


def flips(reference: Sequence[float], other: Sequence[float],
          pairs: Sequence[tuple[int, int]]) -> list[bool]:
    """For each pair (i, j): whether `other` orders items i and j differently from `reference`
    (the decision is ``nll[i] < nll[j]``)."""
    return [(reference[i] < reference[j]) != (other[i] < other[j]) for i, j in pairs]
