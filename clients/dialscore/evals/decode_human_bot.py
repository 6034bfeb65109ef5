"""DECODE's human-bot analyses (paper Section 5.2, Figures 3 and 4; Appendix F, Table 7): the
metrics of a detector on every utterance of annotated human-bot logs, read and expanded by
:mod:`dialscore.evals.human_bot_log` (fields, agreement counts, truncated copies).

Metrics (:func:`human_bot_metrics`), positive class ``contradiction: true``
(:attr:`HumanBotUtterance.marked`):

- precision, recall, F1 and ROC AUC of the detector over the bot utterances (Table 7's
  unbalanced set);
- fire rate (share predicted contradiction) on five groups (Figure 3): "human" (utterances of the
  human speaker), "bot" (of the bot), and "bot@1", "bot@2", "bot@3": the bot utterances where
  *exactly* n annotators agreed on the contradiction label (agreement = the summed verifier
  counts), whether or not the turn is a positive. Each group's size and positives are kept; the
  fire rate of an empty group is None, and :meth:`HumanBotMetrics.empty_groups` names it;
- per bot, the mean contradiction probability against the positive rate, and Pearson's r over the
  bots with at least `min_utterances` bot utterances (180 in the paper; Figure 4); the others are
  named in `bots_too_few`.
A ratio with a zero denominator, and r with fewer than two kept bots or a constant axis, are None.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dialscore.evals.decode import Prediction
from dialscore.evals.human_bot_log import MAX_AGREEMENT, HumanBotUtterance
from dialscore.evals.stats import pearson, prf, roc_auc

__all__ = ["AGREEMENT_GROUPS", "GROUPS", "MIN_BOT_UTTERANCES", "BotStats", "HumanBotMetrics",
           "group_of_agreement", "human_bot_metrics"]

#: The paper keeps bots with at least this many utterances for the correlation (Figure 4).
MIN_BOT_UTTERANCES = 180

#: "bot@n": the bot utterances where exactly n annotators agreed.
AGREEMENT_GROUPS: tuple[str, ...] = tuple(f"bot@{n}" for n in range(1, MAX_AGREEMENT + 1))
GROUPS: tuple[str, ...] = ("human", "bot", *AGREEMENT_GROUPS)


def group_of_agreement(annotators: int) -> str | None:
    """The agreement group of a bot utterance: ``"bot@n"`` for exactly n (1 to 3) annotators,
    None for 0 (or more than 3, which only an `annotator_key` format can give)."""
    return f"bot@{annotators}" if 1 <= annotators <= MAX_AGREEMENT else None


@dataclass(frozen=True)
class BotStats:
    """One bot's bot utterances: how many (`n`), the detector's mean contradiction probability,
    the share that are positives (`marked_rate`) and whether it enters Pearson's r (`kept`)."""

    bot: str
    n: int
    mean_score: float
    marked_rate: float
    kept: bool


#: What the table prints for the fire rate of a group with no utterance.
EMPTY = "empty"


@dataclass(frozen=True)
class HumanBotMetrics:
    """Every human-bot figure (module docstring). ``n_by_group[g]`` is group g's size and
    ``positives_by_group[g]`` how many of its utterances are ``contradiction: true``;
    ``fire_rate[g]`` is None for an empty group. ``n_bot_agreed_not_marked`` counts bot
    utterances with an agreement of 1 or more that are not positives (in their group, not
    positives); ``n_bot_marked_no_agreement`` positives whose agreement is 0 (positives, in no
    agreement group)."""

    n_utterances: int
    n_human: int
    n_bot: int
    n_bot_marked: int
    precision: float | None
    recall: float | None
    f1: float | None
    roc_auc: float | None
    fire_rate: Mapping[str, float | None]
    n_by_group: Mapping[str, int]
    positives_by_group: Mapping[str, int]
    n_bot_agreed_not_marked: int
    n_bot_marked_no_agreement: int
    per_bot: tuple[BotStats, ...]
    pearson_r: float | None
    min_utterances: int
    bots_too_few: tuple[str, ...] = field(default_factory=tuple)

    def empty_groups(self) -> tuple[str, ...]:
        """The groups with no utterance, in :data:`GROUPS` order."""
        return tuple(g for g in GROUPS if self.n_by_group[g] == 0)

    def group_notes(self) -> list[str]:
        """A sentence for each empty group (its fire rate is undefined, not 0) and for the
        utterances whose group and label differ."""
        what = {"human": "no utterance of a human speaker", "bot": "no utterance of the bot"}
        notes = [f"{g}: empty: " + what.get(g, f"no bot utterance where exactly {g[4:]} "
                                                 "annotator(s) agreed on the contradiction label")
                 + " in this file; its fire rate is undefined" for g in self.empty_groups()]
        if self.n_bot_agreed_not_marked:
            notes.append(f"{self.n_bot_agreed_not_marked} bot utterance(s) with annotators "
                         "agreeing but no `contradiction: true`: in their @n group, not positives")
        if self.n_bot_marked_no_agreement:
            notes.append(f"{self.n_bot_marked_no_agreement} bot utterance(s) marked "
                         "`contradiction: true` with verifier counts summing to 0: positives, "
                         "in no @n group")
        return notes

    def as_rows(self) -> list[dict[str, Any]]:
        """One row per figure, for the terminal table; a group's row names its size and
        positives, and an empty group's value is "empty"."""
        rows: list[dict[str, Any]] = [
            {"metric": "bot utterances (marked)", "value": f"{self.n_bot} ({self.n_bot_marked})"},
            {"metric": "human utterances", "value": self.n_human},
            {"metric": "precision (bot utterances)", "value": self.precision},
            {"metric": "recall (bot utterances)", "value": self.recall},
            {"metric": "F1 (bot utterances)", "value": self.f1},
            {"metric": "ROC AUC (bot utterances)", "value": self.roc_auc}]
        rows += [{"metric": f"fire rate [{g}] (n={self.n_by_group[g]}, "
                            f"marked {self.positives_by_group[g]})",
                  "value": EMPTY if self.n_by_group[g] == 0 else self.fire_rate[g]}
                 for g in GROUPS]
        rows.append({"metric": f"Pearson r, score vs marked rate (bots with >= "
                               f"{self.min_utterances} utterances: "
                               f"{sum(b.kept for b in self.per_bot)})", "value": self.pearson_r})
        return rows


def human_bot_metrics(utterances: Sequence[HumanBotUtterance], predictions: Sequence[Prediction],
                      min_utterances: int = MIN_BOT_UTTERANCES) -> HumanBotMetrics:
    """Every human-bot figure for paired utterances and predictions (module docstring)."""
    if len(utterances) != len(predictions):
        raise ValueError(f"{len(utterances)} utterances but {len(predictions)} predictions")
    if any(math.isnan(p.probability) for p in predictions):
        raise ValueError("NaN among the predicted probabilities")
    bot = [(u, p) for u, p in zip(utterances, predictions) if not u.is_human]
    members: dict[str, list[tuple[HumanBotUtterance, Prediction]]] = {g: [] for g in GROUPS}
    for u, p in zip(utterances, predictions):
        groups = ["human"] if u.is_human else ["bot", group_of_agreement(u.annotators)]
        for g in groups:
            if g is not None:
                members[g].append((u, p))
    tp = sum(u.marked and p.is_contradiction for u, p in bot)
    fp = sum(not u.marked and p.is_contradiction for u, p in bot)
    fn = sum(u.marked and not p.is_contradiction for u, p in bot)
    precision, recall, f1 = prf(tp, fp, fn)
    by_bot: dict[str, list[tuple[HumanBotUtterance, Prediction]]] = {}
    for u, p in bot:
        by_bot.setdefault(u.bot, []).append((u, p))
    per_bot = tuple(BotStats(bot=name, n=len(rows),
                             mean_score=sum(p.probability for _, p in rows) / len(rows),
                             marked_rate=sum(u.marked for u, _ in rows) / len(rows),
                             kept=len(rows) >= min_utterances)
                    for name, rows in sorted(by_bot.items()))
    kept = [b for b in per_bot if b.kept]
    return HumanBotMetrics(
        n_utterances=len(utterances), n_human=len(members["human"]), n_bot=len(bot),
        n_bot_marked=sum(u.marked for u, _ in bot),
        precision=precision, recall=recall, f1=f1,
        roc_auc=roc_auc([u.marked for u, _ in bot], [p.probability for _, p in bot]) if bot else None,
        fire_rate={g: (sum(p.is_contradiction for _, p in v) / len(v) if v else None)
                   for g, v in members.items()},
        n_by_group={g: len(v) for g, v in members.items()},
        positives_by_group={g: sum(u.marked for u, _ in v) for g, v in members.items()},
        n_bot_agreed_not_marked=sum(u.annotators > 0 and not u.marked for u, _ in bot),
        n_bot_marked_no_agreement=sum(u.marked and u.annotators == 0 for u, _ in bot),
        per_bot=per_bot,
        pearson_r=pearson([b.mean_score for b in kept], [b.marked_rate for b in kept]),
        min_utterances=min_utterances,
        bots_too_few=tuple(b.bot for b in per_bot if not b.kept))
