"""The scored pairs of a probe run and their metrics (spec section 2), per group of pairs:

* **accuracy**: the share of pairs where the valid explanation's NLL is *strictly* lower than the
  corrupted one's (a tie is a miss); chance is 0.5.
* **mean ΔNLL**: the mean of ``NLL(corrupted) - NLL(valid)``; positive means the model prefers
  the valid explanation.
* **95% CI of the accuracy**: percentile bootstrap that resamples *dialogues* (with
  replacement, ``n_boot`` times, default 1000; a dialogue is (dataset, dialogue_id)) and takes
  every pair of each drawn dialogue, from a generator seeded with the run's seed and the group's
  key, so a report is reproducible. Pairs are not independent (the pairs of one explanation share
  its NLL, the explanations of one dialogue share its history), so resampling pairs would give
  intervals 1.2-1.4 times too narrow. :mod:`dialscore.probes.compare` compares two models on the
  same pairs with the same dialogue-level bootstrap.

Groups: model x setting x dataset x category, and model x setting x dataset x corruption, each
also with ``dataset == "all"`` (every dataset pooled). A category group has
``corruption == "all"``.
"""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any

from dialscore.probes.corruptions import CORRUPTIONS

__all__ = ["CATEGORIES", "GROUP_COLUMNS", "PAIR_COLUMNS", "PAPER_DATASETS", "GroupMetrics",
           "ScoredPair", "accuracy", "bootstrap_ci", "cluster_bootstrap_ci", "mean_delta",
           "ordered_datasets", "summarize"]

PAPER_DATASETS: tuple[str, ...] = ("DailyDialog", "EmpatheticDialogues", "MuTual", "SocialIQA")
CATEGORIES: tuple[str, ...] = ("logical", "complete")


@dataclass(frozen=True)
class ScoredPair:
    """A valid explanation and a corruption of it, both scored by one model in one setting.

    ``pair_id`` names the row within its run (``model|setting|dialogue_id|e<index>|corruption``,
    so it differs between models); :attr:`probe_key` names the probe pair itself, the same for
    every model that scored it."""

    pair_id: str
    model: str
    setting: str
    dataset: str
    dialogue_id: str
    explanation_index: int
    dimension: str
    corruption: str
    category: str
    valid_text: str
    corrupted_text: str
    nll_valid: float
    nll_corrupted: float
    #: True when the source of either item was shortened from the left to fit the model's window
    #: (whole oldest turns dropped, or tokens cut: the model format's `truncation`).
    truncated: bool = False
    #: The ids of the two scored items in the run's ``scores.jsonl`` (its dialogue, target and,
    #: when kept, per-token NLLs; the HTML report's drill-down reads them); "" when unknown.
    valid_item: str = ""
    corrupted_item: str = ""

    @property
    def probe_key(self) -> tuple[str, str, str, int, str]:
        """What identifies the probe pair whatever model scored it: ``(setting, dataset,
        dialogue_id, explanation_index, corruption)``. Two models' rows with the same key
        compare the same valid explanation with the same corruption type in the same setting."""
        return (self.setting, self.dataset, self.dialogue_id, self.explanation_index,
                self.corruption)

    @property
    def delta(self) -> float:
        """NLL(corrupted) - NLL(valid): positive when the model prefers the valid explanation."""
        return self.nll_corrupted - self.nll_valid

    @property
    def correct(self) -> bool:
        """The valid explanation got strictly lower NLL (ties are misses)."""
        return self.nll_valid < self.nll_corrupted

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "delta": self.delta, "correct": self.correct}


PAIR_COLUMNS: tuple[str, ...] = tuple(f.name for f in fields(ScoredPair)) + ("delta", "correct")


def accuracy(pairs: Sequence[ScoredPair]) -> float | None:
    """Share of pairs with the valid NLL strictly lower; None for no pairs."""
    return sum(p.correct for p in pairs) / len(pairs) if pairs else None


def mean_delta(pairs: Sequence[ScoredPair]) -> float | None:
    """Mean of NLL(corrupted) - NLL(valid); None for no pairs."""
    return sum(p.delta for p in pairs) / len(pairs) if pairs else None


def _group_seed(seed: int, key: Sequence[str]) -> int:
    return int.from_bytes(hashlib.sha256(json.dumps([seed, *key]).encode()).digest()[:8], "big")


def cluster_bootstrap_ci(outcomes: Sequence[bool], clusters: Sequence[Any], seed: int,
                         n_boot: int = 1000, level: float = 0.95) -> tuple[float, float] | None:
    """Percentile bootstrap interval of the pooled mean of 0/1 outcomes, resampling whole
    clusters (e.g. dialogues) with replacement: each replicate draws as many clusters as there
    are and takes the share of successes among all their outcomes. None for no outcomes. Needs
    numpy (the `reports` extra)."""
    if len(outcomes) != len(clusters):
        raise ValueError(f"{len(outcomes)} outcomes but {len(clusters)} cluster labels")
    if not outcomes:
        return None
    import numpy as np

    index: dict[Any, int] = {}
    for c in clusters:
        index.setdefault(c, len(index))
    sizes = np.zeros(len(index))
    hits = np.zeros(len(index))
    for o, c in zip(outcomes, clusters):
        sizes[index[c]] += 1
        hits[index[c]] += bool(o)
    rng = np.random.Generator(np.random.PCG64(seed))
    draws = rng.integers(0, len(index), size=(n_boot, len(index)))
    means = hits[draws].sum(axis=1) / sizes[draws].sum(axis=1)
    alpha = (1.0 - level) / 2
    lo, hi = np.quantile(means, [alpha, 1.0 - alpha])
    return float(lo), float(hi)


def bootstrap_ci(outcomes: Sequence[bool], seed: int, n_boot: int = 1000,
                 level: float = 0.95) -> tuple[float, float] | None:
    """Percentile bootstrap interval of the mean of 0/1 outcomes treated as independent (the
    pair-level interval; reports use :func:`cluster_bootstrap_ci`); None for no outcomes.

    Resampling n outcomes with replacement and counting successes is a Binomial(n, k/n) draw, so
    that is what is drawn (the same distribution, without materialising the resamples). Needs
    numpy (the `reports` extra)."""
    n = len(outcomes)
    if n == 0:
        return None
    import numpy as np

    k = sum(bool(o) for o in outcomes)
    rng = np.random.Generator(np.random.PCG64(seed))
    means = rng.binomial(n, k / n, size=n_boot) / n
    alpha = (1.0 - level) / 2
    lo, hi = np.quantile(means, [alpha, 1.0 - alpha])
    return float(lo), float(hi)


@dataclass(frozen=True)
class GroupMetrics:
    model: str
    setting: str
    dataset: str          # a dataset name, or "all"
    category: str         # logical | complete
    corruption: str       # a corruption type, or "all" for a category group
    n: int
    correct: int
    accuracy: float | None
    ci_low: float | None
    ci_high: float | None
    mean_delta: float | None
    ties: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


GROUP_COLUMNS: tuple[str, ...] = tuple(f.name for f in fields(GroupMetrics))


def _metrics(key: tuple[str, str, str, str, str], pairs: Sequence[ScoredPair], seed: int,
             n_boot: int) -> GroupMetrics:
    ci = cluster_bootstrap_ci([p.correct for p in pairs], [(p.dataset, p.dialogue_id) for p in pairs],
                              _group_seed(seed, key), n_boot)
    return GroupMetrics(*key, n=len(pairs), correct=sum(p.correct for p in pairs),
                        accuracy=accuracy(pairs), ci_low=ci[0] if ci else None,
                        ci_high=ci[1] if ci else None, mean_delta=mean_delta(pairs),
                        ties=sum(p.nll_valid == p.nll_corrupted for p in pairs))


def summarize(pairs: Iterable[ScoredPair], seed: int = 0, n_boot: int = 1000) -> list[GroupMetrics]:
    """Metrics per model x setting x (dataset | all) x (category | corruption), sorted."""
    buckets: dict[tuple[str, str, str, str, str], list[ScoredPair]] = defaultdict(list)
    for p in pairs:
        for dataset in (p.dataset, "all"):
            buckets[(p.model, p.setting, dataset, p.category, "all")].append(p)
            buckets[(p.model, p.setting, dataset, p.category, p.corruption)].append(p)
    return [_metrics(key, buckets[key], seed, n_boot) for key in sorted(buckets, key=_group_order)]


def _dataset_order(name: str) -> tuple[int, str]:
    if name == "all":
        return (2, "")
    return (0, f"{PAPER_DATASETS.index(name):02d}") if name in PAPER_DATASETS else (1, name)


def _group_order(key: tuple[str, str, str, str, str]) -> tuple:
    model, setting, dataset, category, corruption = key
    return (setting != "inference", setting, model, _dataset_order(dataset),
            CATEGORIES.index(category) if category in CATEGORIES else 9,
            -1 if corruption == "all" else CORRUPTIONS.index(corruption))


def ordered_datasets(names: Iterable[str]) -> list[str]:
    return sorted(set(names) - {"all"}, key=_dataset_order)
