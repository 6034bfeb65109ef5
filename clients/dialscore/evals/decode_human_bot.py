"""DECODE's human-bot analyses (paper Section 5.2, Figures 3 and 4; Appendix F, Table 7): the
per-utterance expansion of annotated human-bot logs and its metrics.

Data: DECODE JSON Lines records whose turns each carry an `auxiliary` with `contradiction`
(whether annotators marked that utterance a contradiction) and, when the file has it, how many
annotators marked it (see :func:`annotator_count`); the record's `auxiliary.original_model` names
the bot and `agents[AGENT_ID].is_human` says which speaker is human.

Expansion (:func:`expand_human_bot`): every utterance with at least one earlier turn becomes its
own DECODE dialogue, the turns up to and including it, labelled with its own mark (so the
detector sees each bot utterance against its own preceding context, not only each record's last
turn). First turns have no context and are skipped (counted). DECODE files may hold several
truncated copies of one conversation (`conversation_id` "ID#truncated#K"): an utterance is kept
once per (conversation, turn id, text).

Metrics (:func:`human_bot_metrics`), positive class "marked contradiction":
- precision, recall, F1 and ROC AUC over the bot utterances (Table 7's unbalanced set);
- fire rate (share predicted contradiction) on five groups: "human", "bot", and "bot@1",
  "bot@2", "bot@3" (bot utterances marked by at least 1, 2, 3 annotators; Figure 3);
- per bot, the mean contradiction probability against the marked rate, and Pearson's r over the
  bots with at least `min_utterances` bot utterances (180 in the paper; Figure 4); the others are
  named in `bots_too_few`.
A ratio with a zero denominator, and r with fewer than two kept bots or a constant axis, are None.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dialscore.evals.decode import DecodeDialogue, Prediction, prf, roc_auc
from dialscore.types import Turn

__all__ = ["ANNOTATOR_KEYS", "BotStats", "HumanBotMetrics", "HumanBotUtterance", "MIN_BOT_UTTERANCES",
           "annotator_count", "expand_human_bot", "human_bot_metrics", "read_human_bot"]

#: The paper keeps bots with at least this many utterances for the correlation (Figure 4).
MIN_BOT_UTTERANCES = 180

#: Keys of a turn's `auxiliary` read, in order, for the number of annotators who marked it: an
#: int, or a list whose truthy entries are counted (one vote per annotator).
ANNOTATOR_KEYS: tuple[str, ...] = ("contradiction_count", "num_annotators_marked", "n_annotators",
                                   "annotators", "votes", "verifications", "verifiers")

GROUPS: tuple[str, ...] = ("human", "bot", "bot@1", "bot@2", "bot@3")
UNKNOWN_BOT = "(unknown)"


def annotator_count(aux: Mapping[str, Any] | None, key: str | None = None) -> int:
    """How many annotators marked a turn as a contradiction.

    Read from `key` when given, else from the first of :data:`ANNOTATOR_KEYS` present; an int is
    taken as is and a list counts its truthy entries. With no count at all, a turn marked
    `contradiction: true` counts as 1 annotator and any other turn as 0.
    """
    aux = aux or {}
    for k in ((key,) if key else ANNOTATOR_KEYS):
        value = aux.get(k)
        if isinstance(value, bool):
            return int(value)
        if isinstance(value, int):
            return value
        if isinstance(value, list):
            return sum(bool(v) for v in value)
    return 1 if aux.get("contradiction") is True else 0


@dataclass(frozen=True)
class HumanBotUtterance:
    """One utterance with its preceding context: `dialogue` ends with it and is labelled with its
    mark; `annotators` is how many annotators marked it."""

    id: str
    dialogue: DecodeDialogue
    bot: str
    is_human: bool
    marked: bool
    annotators: int


def _is_human(agents: Any, speaker: str) -> bool:
    if not isinstance(agents, Mapping):
        raise ValueError("a human-bot record needs `agents` saying which speaker is human")
    agent = agents.get(speaker)
    if not isinstance(agent, Mapping) or "is_human" not in agent:
        raise ValueError(f"`agents` has no `is_human` for speaker {speaker!r}")
    return bool(agent["is_human"])


def expand_human_bot(records: Iterable[Mapping[str, Any]], annotator_key: str | None = None,
                     ) -> tuple[list[HumanBotUtterance], int]:
    """Every utterance with context, as its own dialogue (see the module docstring). Returns the
    utterances and the number of first turns skipped for lack of context."""
    out: list[HumanBotUtterance] = []
    seen: set[tuple[str, int, str]] = set()
    skipped = 0
    for index, record in enumerate(records):
        where = f"record {index}"
        aux = record.get("auxiliary") if isinstance(record.get("auxiliary"), Mapping) else {}
        bot = str(aux.get("original_model") or UNKNOWN_BOT)
        raw_turns = record.get("turns") or []
        try:
            turns = tuple(Turn(id=int(t["turn_id"]), speaker=str(t["agent_id"]), text=str(t["text"]))
                          for t in raw_turns)
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"{where}: each turn needs `turn_id`, `agent_id` and `text` ({exc})") from None
        conversation = str(record.get("conversation_id") or record.get("record_id") or where)
        base = conversation.split("#")[0]
        for i, (turn, raw) in enumerate(zip(turns, raw_turns)):
            key = (base, turn.id, turn.text)
            if key in seen:
                continue
            seen.add(key)
            if i == 0:
                skipped += 1
                continue
            taux = raw.get("auxiliary") if isinstance(raw.get("auxiliary"), Mapping) else {}
            marked = taux.get("contradiction") is True
            uid = f"{base}@{turn.id}"
            dialogue = DecodeDialogue(id=uid, index=len(out), turns=turns[:i + 1],
                                      is_contradiction=marked, group=bot, conversation=base)
            out.append(HumanBotUtterance(
                id=uid, dialogue=dialogue, bot=bot,
                is_human=_is_human(record.get("agents"), turn.speaker), marked=marked,
                annotators=annotator_count(taux, annotator_key) if marked else 0))
    return out, skipped


def read_human_bot(path: str | Path, annotator_key: str | None = None,
                   ) -> tuple[list[HumanBotUtterance], int, int]:
    """:func:`expand_human_bot` of a JSON Lines file; returns (utterances, first turns skipped,
    records read)."""
    with Path(path).open(encoding="utf-8") as handle:
        records = [json.loads(line) for line in handle if line.strip()]
    utterances, skipped = expand_human_bot(records, annotator_key)
    return utterances, skipped, len(records)


@dataclass(frozen=True)
class BotStats:
    bot: str
    n: int
    mean_score: float
    marked_rate: float
    kept: bool


@dataclass(frozen=True)
class HumanBotMetrics:
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
    per_bot: tuple[BotStats, ...]
    pearson_r: float | None
    min_utterances: int
    bots_too_few: tuple[str, ...] = field(default_factory=tuple)

    def as_rows(self) -> list[dict[str, Any]]:
        """One row per figure, for the terminal table."""
        rows: list[dict[str, Any]] = [
            {"metric": "bot utterances (marked)", "value": f"{self.n_bot} ({self.n_bot_marked})"},
            {"metric": "human utterances", "value": self.n_human},
            {"metric": "precision (bot utterances)", "value": self.precision},
            {"metric": "recall (bot utterances)", "value": self.recall},
            {"metric": "F1 (bot utterances)", "value": self.f1},
            {"metric": "ROC AUC (bot utterances)", "value": self.roc_auc}]
        rows += [{"metric": f"fire rate [{g}] (n={self.n_by_group[g]})", "value": self.fire_rate[g]}
                 for g in GROUPS]
        rows.append({"metric": f"Pearson r, score vs marked rate (bots with >= "
                               f"{self.min_utterances} utterances: "
                               f"{sum(b.kept for b in self.per_bot)})", "value": self.pearson_r})
        return rows


def pearson(xs: Sequence[float], ys: Sequence[float]) -> float | None:
    """Pearson's r; None with fewer than two points or a constant axis."""
    if len(xs) < 2 or len(set(xs)) < 2 or len(set(ys)) < 2:
        return None
    return statistics.correlation(xs, ys)


def human_bot_metrics(utterances: Sequence[HumanBotUtterance], predictions: Sequence[Prediction],
                      min_utterances: int = MIN_BOT_UTTERANCES) -> HumanBotMetrics:
    """Every human-bot figure for paired utterances and predictions (module docstring)."""
    if len(utterances) != len(predictions):
        raise ValueError(f"{len(utterances)} utterances but {len(predictions)} predictions")
    if any(math.isnan(p.probability) for p in predictions):
        raise ValueError("NaN among the predicted probabilities")
    bot = [(u, p) for u, p in zip(utterances, predictions) if not u.is_human]
    members: dict[str, list[bool]] = {g: [] for g in GROUPS}
    for u, p in zip(utterances, predictions):
        if u.is_human:
            members["human"].append(p.is_contradiction)
            continue
        members["bot"].append(p.is_contradiction)
        for k in (1, 2, 3):
            if u.annotators >= k:
                members[f"bot@{k}"].append(p.is_contradiction)
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
        fire_rate={g: (sum(v) / len(v) if v else None) for g, v in members.items()},
        n_by_group={g: len(v) for g, v in members.items()},
        per_bot=per_bot,
        pearson_r=pearson([b.mean_score for b in kept], [b.marked_rate for b in kept]),
        min_utterances=min_utterances,
        bots_too_few=tuple(b.bot for b in per_bot if not b.kept))
