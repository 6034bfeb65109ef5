"""The robustness battery's figure: how each variant's scores compare with the originals'.

Needs matplotlib (the `reports` extra): check :func:`dialscore.reporting.plots.plots_available`
first.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path

from dialscore.evals.robustness_stats import VariantStats
from dialscore.reporting.plots import new_figure, save_png

__all__ = ["plot_variants"]

CATEGORY_COLORS = {"slight": "tab:green", "simplified": "tab:olive", "unnatural": "tab:red",
                   "generic": "tab:purple"}


def plot_variants(stats: Mapping[str, VariantStats], original: VariantStats, title: str,
                  path: str | Path) -> Path:
    """Write a PNG of two panels to `path`: the mean score per variant (a point with 1-SD
    whiskers, coloured by category) against the originals' mean and 1-SD band; the share of
    pairs where the variant beat the original. Returns the path."""
    kinds = list(stats)
    fig = new_figure(max(8.0, 0.6 * len(kinds) + 3), 7.5)
    top, bottom = fig.subplots(2, 1, sharex=True)
    x = list(range(len(kinds)))
    means = [stats[k].mean if stats[k].mean is not None else math.nan for k in kinds]
    sds = [stats[k].std if stats[k].std is not None else 0.0 for k in kinds]
    col = [CATEGORY_COLORS.get(stats[k].category or "", "grey") for k in kinds]
    if original.mean is not None:
        top.axhline(original.mean, color="black", linewidth=1, label="original mean")
        top.axhspan(original.mean - (original.std or 0), original.mean + (original.std or 0),
                    color="grey", alpha=0.2, label="original +- 1 SD")
    # Points, not bars: scores may be negative (negated NLLs), so a bar from 0 means nothing.
    for xi, m, sd, c in zip(x, means, sds, col):
        top.errorbar([xi], [m], yerr=[sd], fmt="o", color=c, ecolor=c, capsize=4, markersize=7)
    top.set_ylabel("mean score (higher = better)")
    top.set_title(title, fontsize=10)
    top.legend(fontsize=8)
    beat = [stats[k].beat_share if stats[k].beat_share is not None else math.nan for k in kinds]
    bottom.bar(x, beat, color=col)
    bottom.axhline(0.5, color="grey", linestyle="--", linewidth=1)
    bottom.set_ylim(0, 1.05)
    bottom.set_ylabel("share beating the original")
    bottom.set_xticks(x)
    bottom.set_xticklabels([f"{k}\n({stats[k].category})" for k in kinds], rotation=35,
                           ha="right", fontsize=8)
    return save_png(fig, path)
