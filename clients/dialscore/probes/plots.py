"""The plots of a probe run (matplotlib, the `reports` extra): ``corruptions.png``, accuracy per
corruption (like the CEDAR paper's Figure 7), and ``models.png``, the models compared per dataset
and category (like Figures 5/6). Each bar is a group's accuracy with its 95% CI; the dashed line
is chance (0.5)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from dialscore.probes.corruptions import CATEGORY, CORRUPTIONS
from dialscore.probes.metrics import CATEGORIES, GroupMetrics, ordered_datasets
from dialscore.reporting.plots import new_figure, save_png

__all__ = ["plot_corruptions", "plot_models"]


def _bars(ax, labels: Sequence[str], series: Mapping[str, Sequence[GroupMetrics | None]],
          title: str) -> None:
    """Grouped accuracy bars with 95% CI whiskers and the chance line."""
    n_series = max(1, len(series))
    width = 0.8 / n_series
    x = range(len(labels))
    for k, (name, gs) in enumerate(series.items()):
        acc = [g.accuracy if g and g.accuracy is not None else math.nan for g in gs]
        lo = [a - g.ci_low if g and g.ci_low is not None else 0.0 for a, g in zip(acc, gs)]
        hi = [g.ci_high - a if g and g.ci_high is not None else 0.0 for a, g in zip(acc, gs)]
        ax.bar([xi - 0.4 + width * (k + 0.5) for xi in x], acc, width, yerr=[lo, hi], capsize=2,
               label=name)
    ax.axhline(0.5, color="grey", linestyle="--", linewidth=1)
    ax.set_xticks(x)
    ax.set_xticklabels(labels, rotation=20, ha="right", fontsize=8)
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("accuracy")
    ax.set_title(title, fontsize=10)


def _figure(n_rows: int, n_cols: int):
    fig = new_figure(4.2 * n_cols + 1, 3.2 * n_rows + 0.6)
    axes = fig.subplots(n_rows, n_cols, squeeze=False)
    return fig, axes


def _label(name: str, models: Mapping[str, Mapping[str, Any]] | None) -> str:
    return f"{name} (stand-in)" if models and models.get(name, {}).get("stand_in") else name


def plot_corruptions(groups: Sequence[GroupMetrics], path: str | Path,
                     models: Mapping[str, Mapping[str, Any]] | None = None) -> None:
    """Per-corruption accuracy (all datasets), one panel per setting, one bar per model
    (like the paper's Figure 7)."""
    index = {(g.model, g.setting, g.dataset, g.corruption): g for g in groups}
    settings = sorted({g.setting for g in groups}, key=lambda s: (s != "inference", s))
    fig, axes = _figure(1, len(settings))
    for ax, setting in zip(axes[0], settings):
        names = sorted({g.model for g in groups if g.setting == setting})
        series = {_label(n, models): [index.get((n, setting, "all", c)) for c in CORRUPTIONS]
                  for n in names}
        _bars(ax, [f"{c}\n({CATEGORY[c]})" for c in CORRUPTIONS], series, f"{setting}: by corruption")
    axes[0][0].legend(fontsize=7)
    save_png(fig, path)


def plot_models(groups: Sequence[GroupMetrics], path: str | Path,
                models: Mapping[str, Mapping[str, Any]] | None = None) -> None:
    """Model comparison: accuracy per dataset, one panel per setting x category
    (like the paper's Figures 5/6)."""
    index = {(g.model, g.setting, g.dataset, g.category, g.corruption): g for g in groups}
    settings = sorted({g.setting for g in groups}, key=lambda s: (s != "inference", s))
    datasets = ordered_datasets(g.dataset for g in groups) + ["all"]
    fig, axes = _figure(len(settings), len(CATEGORIES))
    for r, setting in enumerate(settings):
        names = sorted({g.model for g in groups if g.setting == setting})
        for c, cat in enumerate(CATEGORIES):
            series = {_label(n, models): [index.get((n, setting, ds, cat, "all")) for ds in datasets]
                      for n in names}
            _bars(axes[r][c], datasets, series, f"{setting}, {cat} corruptions")
    axes[0][0].legend(fontsize=7)
    save_png(fig, path)
