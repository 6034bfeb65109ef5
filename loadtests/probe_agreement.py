"""Pair-decision agreement with float32 on a large probe workload (part of loadtests.bench_probe).

The timed comparison of bench_probe runs a dozen explanation groups (72 pairs): enough for speed
ratios, far too few to tell two reduced-precision modes' agreement apart (one pair is 1.4
points). This part scores many more groups *once* per mode, untimed for the comparison (their
seconds are printed, not interleaved), and reports for each mode against the float32 reference:
flips, agreement with its Wilson 95% interval, mean and max |dNLL| per item; and for each pair of
modes McNemar's exact test on the pairs exactly one of them flips (loadtests/agreement_stats.py).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

from loadtests.agreement_stats import flips, mcnemar_exact, wilson_interval
from loadtests.common import Column, table


def agreement(scorers: dict[str, Callable[[], list[float]]], reference: str,
              pairs: Sequence[tuple[int, int]]) -> dict[str, Any]:
    """Run every scorer once (the reference first) and compare with the reference.

    Args:
        scorers: name -> a function returning every item's NLL, in one fixed item order.
        reference: the float32 scorer's name (a key of `scorers`).
        pairs: (valid item, corrupted item) indices; the decision is ``nll[valid] < nll[corrupted]``.

    Returns ``{"modes": {name: row}, "paired": [row], "nlls": {name: [...]}}``; a mode row has
    seconds, pairs, flips, agreement, agreement_ci (Wilson 95%), mean/max_abs_dnll.
    """
    order = [reference] + [k for k in scorers if k != reference]
    nlls, seconds = {}, {}
    for name in order:
        t = time.perf_counter()
        nlls[name] = scorers[name]()
        seconds[name] = time.perf_counter() - t
    ref = nlls[reference]
    flipped = {k: flips(ref, v, pairs) for k, v in nlls.items() if k != reference}
    modes = {}
    for name, f in flipped.items():
        k, n = sum(f), len(f)
        lo, hi = wilson_interval(n - k, n)
        diffs = [abs(a - b) for a, b in zip(nlls[name], ref)]
        modes[name] = {"seconds": seconds[name], "pairs": n, "flips": k, "agreement": 1 - k / n,
                       "agreement_ci": [lo, hi], "mean_abs_dnll": statistics.fmean(diffs),
                       "max_abs_dnll": max(diffs)}
    paired = []
    names = list(flipped)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            only_a = sum(x and not y for x, y in zip(flipped[a], flipped[b]))
            only_b = sum(y and not x for x, y in zip(flipped[a], flipped[b]))
            paired.append({"a": a, "b": b, "only_a": only_a, "only_b": only_b,
                           "both": sum(x and y for x, y in zip(flipped[a], flipped[b])),
                           "mcnemar_p": mcnemar_exact(only_a, only_b)})
    return {"reference": reference, "reference_seconds": seconds[reference], "modes": modes,
            "paired": paired, "nlls": nlls}


def print_agreement(report: dict[str, Any], labels: dict[str, str]) -> None:
    """The tables of :func:`agreement` (labels: mode name -> printed method name)."""
    columns = [Column("method", 44, left=True), Column("pairs", 6, "d"), Column("flips", 5, "d"),
               Column("agree", 8, ".2%"), Column("Wilson 95%", 17), Column("mean|dNLL|", 10, ".5f"),
               Column("max|dNLL|", 9, ".5f"), Column("s (once)", 9, ".1f")]
    print(table(columns, [
        [labels.get(name, name), r["pairs"], r["flips"], r["agreement"],
         "{:.2%}-{:.2%}".format(*r["agreement_ci"]), r["mean_abs_dnll"], r["max_abs_dnll"],
         r["seconds"]] for name, r in report["modes"].items()]))
    print(f"(reference {labels.get(report['reference'], report['reference'])}: "
          f"{report['reference_seconds']:.1f} s)")
    for p in report["paired"]:
        print(f"McNemar {labels.get(p['a'], p['a'])} vs {labels.get(p['b'], p['b'])}: flipped by the "
              f"first only {p['only_a']}, the second only {p['only_b']}, both {p['both']}; exact "
              f"two-sided p = {p['mcnemar_p']:.3g}")
