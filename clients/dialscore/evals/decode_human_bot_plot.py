"""The human-bot figure (DECODE Figure 4): per bot, the detector's mean contradiction score
against the human-marked contradiction rate.

Needs matplotlib (the `reports` extra): check :func:`dialscore.reporting.plots.plots_available`
first.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from dialscore.evals.decode_human_bot import BotStats
from dialscore.reporting.plots import new_figure, save_png

__all__ = ["plot_bots"]


def plot_bots(bots: Sequence[BotStats], pearson_r: float | None, title: str,
              path: str | Path) -> Path:
    """Write a scatter PNG to `path`: one labelled point per bot (x: marked rate, y: mean
    score); bots under the utterance minimum are hollow grey and outside r. Returns the path."""
    fig = new_figure(7.0, 5.5)
    ax = fig.subplots()
    for b in bots:
        style = dict(color="tab:blue") if b.kept else dict(facecolors="none", edgecolors="grey")
        ax.scatter([b.marked_rate], [b.mean_score], s=40, **style)
        ax.annotate(f"{b.bot} (n={b.n})", (b.marked_rate, b.mean_score), fontsize=7,
                    xytext=(4, 4), textcoords="offset points")
    r = "n/a" if pearson_r is None else f"{pearson_r:.3f}"
    ax.set_title(f"{title}\nPearson r = {r} (filled: bots kept)", fontsize=10)
    ax.set_xlabel("human-marked contradiction rate")
    ax.set_ylabel("mean detector contradiction score")
    return save_png(fig, path)
