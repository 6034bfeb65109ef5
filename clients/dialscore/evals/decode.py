"""DECODE contradiction detection: reader, wire types, metrics and the A2T / RCT diagnostic sets.

Data (JSON Lines, one dialogue per line): `turns` (each with `turn_id`, `agent_id`, `text`),
`is_contradiction` (about the last turn) and `aggregated_contradiction_indices`, the turn ids of
the evidence. That list includes the last turn's own id, which is not evidence: `read_decode`
drops it, so `DecodeDialogue.evidence` holds only earlier turns. Turns are identified by their
`turn_id`, never by position or parity.

Wire format. `DecodeDialogue.to_request()` is what a runner sends to the contradiction service,
`{"turns": [{"id", "speaker", "text"}, ...]}`, and `Prediction.from_response(body)` reads back
`{"is_contradiction", "probability", "evidence": [{"turn", "probability"}, ...]}`.

Metrics (`decode_metrics`), with "contradiction" as the positive class:
- accuracy of the 2-way label;
- strict accuracy: the label right and the predicted evidence set equal to the gold one; for a
  gold non-contradiction that means predicting non-contradiction with no evidence at all (the
  evidence a prediction reports counts as reported, whatever its label);
- supporting-evidence precision, recall and F1 over (dialogue, earlier turn) pairs, pooled over
  all dialogues given (micro-averaged; F1 = 2tp / (2tp + fp + fn));
  these `strict_accuracy` / `evidence_*` figures are the *pooled* convention. The paper's
  evidence (Eq. 3) ranges over earlier turns of the last speaker only, so the *paper-scope*
  figures (`*_paper`) count only the same-speaker candidate pairs of gold contradictions: gold
  and predicted evidence are both restricted to the earlier turns by the last speaker, over the
  dialogues labelled contradiction; `strict_accuracy_paper` needs the label right and, for a gold
  contradiction, the restricted evidence sets equal. `n_other_speaker_gold_evidence` counts the
  gold evidence turns by another speaker (which a structured detector can never return).
  A mode that returns no evidence (unstructured) has neither: those fields are "n/a" (:data:`NA`);
- precision, recall and F1 of the label, ROC AUC of the probability, and the fire rate (share
  predicted contradiction), overall and per group (by default the record's `auxiliary.source`).
A ratio whose denominator is zero is None rather than 0.

Diagnostic sets (only dialogues labelled contradiction with evidence qualify; others are skipped
and counted):
- A2T (`a2t`): two unrelated utterances, a consecutive pair taken from another dialogue chosen
  by the seeded RNG (never one from the same conversation), are inserted right after the earliest
  evidence turn, so they sit between the contradicting utterances. They are given the speakers
  (other speaker, evidence speaker), so the alternation is kept. The label and the evidence stay.
- RCT (`rct`): every evidence turn is removed together with its partner, the turn just before it
  when that one is by another speaker (the utterance it answers), else the turn just after it
  when that one is by another speaker; the last utterance is never removed. The label becomes
  non-contradiction and the evidence empty.
Both sets then drop every derived dialogue with no earlier turn by the last speaker (as the
official RCT set does) and count them (`TransformResult.dropped`).
Both renumber the turn ids to 0..n-1 in order (DECODE files use ids equal to positions) and map
the evidence accordingly; `meta["source_turn_ids"]` gives each new turn's original id (None for
an inserted turn) and `meta["transform"]` the transform's name.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from dialscore.types import Turn
from dialscore.reporting.rows import write_jsonl


@dataclass(frozen=True)
class DecodeDialogue:
    """One DECODE dialogue. `evidence` holds earlier turn ids only (never the last turn's)."""

    id: str
    index: int
    turns: tuple[Turn, ...]
    is_contradiction: bool
    evidence: frozenset[int] = frozenset()
    group: str | None = None
    conversation: str | None = None
    meta: Mapping[str, Any] = field(default_factory=dict, compare=False, hash=False)

    @property
    def last(self) -> Turn:
        return self.turns[-1]

    def position(self, turn_id: int) -> int:
        """The index in `turns` of the turn with this id."""
        for i, turn in enumerate(self.turns):
            if turn.id == turn_id:
                return i
        raise KeyError(f"{self.id}: no turn with id {turn_id}")

    def to_request(self) -> dict[str, Any]:
        """The body a runner sends to the contradiction service for this dialogue."""
        return {"turns": [t.to_json() for t in self.turns]}


def _check(d: DecodeDialogue, where: str) -> DecodeDialogue:
    if not d.turns:
        raise ValueError(f"{where}: a dialogue needs at least one turn")
    ids = [t.id for t in d.turns]
    if len(set(ids)) != len(ids):
        raise ValueError(f"{where}: duplicate turn ids {ids}")
    unknown = sorted(d.evidence - set(ids))
    if unknown:
        raise ValueError(f"{where}: evidence turn ids {unknown} are not among the turns {ids}")
    if d.last.id in d.evidence:
        raise ValueError(f"{where}: the last turn cannot be its own evidence")
    if d.evidence and not d.is_contradiction:
        raise ValueError(f"{where}: a non-contradiction cannot have evidence {sorted(d.evidence)}")
    return d


def default_group(record: Mapping[str, Any]) -> str | None:
    """The group of a raw record: `auxiliary.source` when present."""
    aux = record.get("auxiliary")
    source = aux.get("source") if isinstance(aux, Mapping) else None
    return None if source is None else str(source)


def dialogue_from_record(record: Mapping[str, Any], index: int = 0, where: str = "record",
                         group_key: Callable[[Mapping[str, Any]], str | None] = default_group,
                         ) -> DecodeDialogue:
    """Build a dialogue from one DECODE JSON object (see the module docstring)."""
    try:
        raw_turns = record["turns"]
        label = record["is_contradiction"]
    except KeyError as exc:
        raise ValueError(f"{where}: missing field {exc.args[0]!r}") from None
    if not isinstance(label, bool):
        raise ValueError(f"{where}: `is_contradiction` must be true or false, got {label!r}")
    try:
        turns = tuple(Turn(id=int(t["turn_id"]), speaker=str(t["agent_id"]), text=str(t["text"]))
                      for t in raw_turns)
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"{where}: each turn needs `turn_id`, `agent_id` and `text` "
                         f"({exc})") from None
    indices = record.get("aggregated_contradiction_indices") or []
    last_id = turns[-1].id if turns else None
    evidence = frozenset(int(i) for i in indices) - {last_id}
    conversation = record.get("conversation_id")
    ident = record.get("record_id") or conversation or where
    return _check(DecodeDialogue(id=str(ident), index=index, turns=turns, is_contradiction=label,
                                 evidence=evidence, group=group_key(record),
                                 conversation=str(conversation).split("#")[0] if conversation
                                 else None), where)


def read_decode(path: str | Path,
                group_key: Callable[[Mapping[str, Any]], str | None] = default_group,
                ) -> list[DecodeDialogue]:
    """Read a DECODE JSON Lines file; `index` is the 0-based position among non-blank lines.

    A dialogue's id is its `record_id` (else its `conversation_id`, else "FILE:LINE"); when ids
    repeat within the file, every id becomes "STEM:INDEX" so that they stay unique.
    """
    source = Path(path)
    out: list[DecodeDialogue] = []
    with source.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if line.strip():
                out.append(dialogue_from_record(json.loads(line), index=len(out),
                                                where=f"{source}:{number}", group_key=group_key))
    ids = [d.id for d in out]
    if len(set(ids)) != len(ids):
        # Ids must be unique to pair predictions and evidence; fall back to file positions.
        out = [replace(d, id=f"{source.stem}:{d.index}") for d in out]
    return out


def _agent(speaker: str | int) -> int | str:
    """DECODE's `agent_id`: the reader keeps speakers as text; digits go back to numbers."""
    return int(speaker) if isinstance(speaker, str) and speaker.isdigit() else speaker


def to_record(d: DecodeDialogue) -> dict[str, Any]:
    """The DECODE JSON object for a dialogue (the evidence list includes the last turn's id when
    the label is contradiction, as in the original files), so `read_decode` reads it back."""
    indices = sorted(d.evidence | {d.last.id}) if d.is_contradiction else []
    aux: dict[str, Any] = {"source": d.group} if d.group is not None else {}
    aux.update({k: v for k, v in d.meta.items()})
    return {
        "record_id": d.id,
        **({"conversation_id": d.conversation} if d.conversation is not None else {}),
        "turns": [{"turn_id": t.id, "agent_id": _agent(t.speaker), "text": t.text}
                  for t in d.turns],
        "is_contradiction": d.is_contradiction,
        "aggregated_contradiction_indices": indices,
        "auxiliary": aux,
    }


def write_decode(path: str | Path, dialogues: Sequence[DecodeDialogue]) -> Path:
    """Write dialogues (e.g. an A2T or RCT set) as DECODE JSON Lines, atomically."""
    return write_jsonl(path, (to_record(d) for d in dialogues))


# --- predictions and metrics ------------------------------------------------------------------


@dataclass(frozen=True)
class Prediction:
    """The service's answer for one dialogue."""

    is_contradiction: bool
    probability: float
    evidence: frozenset[int] = frozenset()
    evidence_probabilities: Mapping[int, float] = field(default_factory=dict, compare=False,
                                                        hash=False)

    @classmethod
    def from_response(cls, body: Mapping[str, Any],
                      evidence_threshold: float | None = None) -> "Prediction":
        """Read `{"is_contradiction", "probability", "evidence": [{"turn", "probability"}]}`.

        With `evidence_threshold`, only evidence whose probability exceeds it is kept (for a
        service that lists every candidate turn with its probability).
        """
        probs: dict[int, float] = {}
        for item in body.get("evidence") or []:
            turn = int(item["turn"])
            p = item.get("probability")
            probs[turn] = float(p) if p is not None else math.nan
        kept = {t for t, p in probs.items()
                if evidence_threshold is None or (not math.isnan(p) and p > evidence_threshold)}
        return cls(is_contradiction=bool(body["is_contradiction"]),
                   probability=float(body["probability"]),
                   evidence=frozenset(kept), evidence_probabilities=probs)


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


@dataclass(frozen=True)
class DecodeMetrics:
    n: int
    n_gold_contradiction: int
    n_predicted_contradiction: int
    accuracy: float | None
    strict_accuracy: float | None | str
    evidence_precision: float | None | str
    evidence_recall: float | None | str
    evidence_f1: float | None | str
    strict_accuracy_paper: float | None | str
    evidence_precision_paper: float | None | str
    evidence_recall_paper: float | None | str
    evidence_f1_paper: float | None | str
    n_other_speaker_gold_evidence: int
    precision: float | None
    recall: float | None
    f1: float | None
    roc_auc: float | None
    fire_rate: float | None
    fire_rate_by_group: Mapping[str, float] = field(default_factory=dict)
    n_by_group: Mapping[str, int] = field(default_factory=dict)

    def as_row(self) -> dict[str, object]:
        """The scalar fields as one report row (per-group fire rates as `fire_rate[GROUP]`)."""
        row: dict[str, object] = {k: v for k, v in self.__dict__.items()
                                  if not isinstance(v, Mapping)}
        row.update({f"fire_rate[{g}]": r for g, r in self.fire_rate_by_group.items()})
        return row


NO_GROUP = "(none)"

#: What an evidence figure reads for a mode that returns no evidence (the paper prints "-").
NA = "n/a"

_METRIC_ORDER = ("n", "n_gold_contradiction", "n_predicted_contradiction", "accuracy",
                 "strict_accuracy", "evidence_precision", "evidence_recall", "evidence_f1",
                 "strict_accuracy_paper", "evidence_precision_paper", "evidence_recall_paper",
                 "evidence_f1_paper", "n_other_speaker_gold_evidence",
                 "precision", "recall", "f1", "roc_auc", "fire_rate")


def side_by_side(metrics: Mapping[str, Mapping[str, DecodeMetrics]]) -> list[dict[str, Any]]:
    """Table rows of `metrics[set][mode]`: one row per metric (the fixed ones first, then the
    per-group fire rates), one column per "set/mode", so the modes stand side by side."""
    columns = [(s, m) for s, by_mode in metrics.items() for m in by_mode]
    names = list(_METRIC_ORDER)
    for s, m in columns:
        for key in metrics[s][m].as_row():
            if key not in names:
                names.append(key)
    return [{"metric": name, **{f"{s}/{m}": metrics[s][m].as_row().get(name) for s, m in columns}}
            for name in names]


def decode_metrics(gold: Sequence[DecodeDialogue], predictions: Sequence[Prediction],
                   groups: Sequence[str | None] | None = None,
                   returns_evidence: bool = True) -> DecodeMetrics:
    """All DECODE metrics for paired gold dialogues and predictions (see the module docstring).

    `returns_evidence=False` (the unstructured mode) makes every strict-accuracy and evidence
    figure :data:`NA`.

    `groups` overrides each dialogue's `group` for the per-group fire rate; None becomes
    "(none)".
    """
    if len(gold) != len(predictions):
        raise ValueError(f"{len(gold)} dialogues but {len(predictions)} predictions")
    if groups is not None and len(groups) != len(gold):
        raise ValueError(f"{len(gold)} dialogues but {len(groups)} groups")
    n = len(gold)
    tp = fp = fn = 0
    ev_tp = ev_fp = ev_fn = 0
    pe_tp = pe_fp = pe_fn = 0
    correct = strict = strict_paper = other_speaker = 0
    fired: dict[str, list[bool]] = {}
    for i, (g, p) in enumerate(zip(gold, predictions)):
        label_ok = g.is_contradiction == p.is_contradiction
        correct += label_ok
        strict += label_ok and p.evidence == g.evidence
        tp += g.is_contradiction and p.is_contradiction
        fp += (not g.is_contradiction) and p.is_contradiction
        fn += g.is_contradiction and not p.is_contradiction
        ev_tp += len(p.evidence & g.evidence)
        ev_fp += len(p.evidence - g.evidence)
        ev_fn += len(g.evidence - p.evidence)
        same = frozenset(t.id for t in g.turns[:-1] if t.speaker == g.last.speaker)
        other_speaker += len(g.evidence - same)
        if g.is_contradiction:
            g_same, p_same = g.evidence & same, p.evidence & same
            pe_tp += len(p_same & g_same)
            pe_fp += len(p_same - g_same)
            pe_fn += len(g_same - p_same)
            strict_paper += label_ok and p_same == g_same
        else:
            strict_paper += label_ok
        key = groups[i] if groups is not None else g.group
        fired.setdefault(NO_GROUP if key is None else str(key), []).append(p.is_contradiction)
    precision, recall, f1 = prf(tp, fp, fn)
    ev_p, ev_r, ev_f1 = prf(ev_tp, ev_fp, ev_fn)
    pe_p, pe_r, pe_f1 = prf(pe_tp, pe_fp, pe_fn)
    evidence: dict[str, float | None | str] = {
        "strict_accuracy": strict / n if n else None,
        "evidence_precision": ev_p, "evidence_recall": ev_r, "evidence_f1": ev_f1,
        "strict_accuracy_paper": strict_paper / n if n else None,
        "evidence_precision_paper": pe_p, "evidence_recall_paper": pe_r, "evidence_f1_paper": pe_f1}
    if not returns_evidence:
        evidence = {k: NA for k in evidence}
    n_fired = sum(p.is_contradiction for p in predictions)
    return DecodeMetrics(
        n=n,
        n_gold_contradiction=sum(g.is_contradiction for g in gold),
        n_predicted_contradiction=n_fired,
        accuracy=correct / n if n else None,
        **evidence,  # type: ignore[arg-type]
        n_other_speaker_gold_evidence=other_speaker,
        precision=precision, recall=recall, f1=f1,
        roc_auc=roc_auc([g.is_contradiction for g in gold], [p.probability for p in predictions])
        if n else None,
        fire_rate=n_fired / n if n else None,
        fire_rate_by_group={k: sum(v) / len(v) for k, v in sorted(fired.items())},
        n_by_group={k: len(v) for k, v in sorted(fired.items())},
    )


# --- diagnostic transforms ------------------------------------------------------------------


class NotApplicable(ValueError):
    """The transform needs a dialogue labelled contradiction with evidence."""


def _require_evidence(d: DecodeDialogue, name: str) -> None:
    if not d.is_contradiction or not d.evidence:
        raise NotApplicable(f"{name} needs a contradiction with evidence; {d.id} has "
                            f"is_contradiction={d.is_contradiction}, evidence={sorted(d.evidence)}")


def _renumbered(d: DecodeDialogue, turns: Sequence[Turn | tuple[str, str]],
                source_ids: Sequence[int | None], is_contradiction: bool, transform: str,
                extra: Mapping[str, Any] | None = None) -> DecodeDialogue:
    """Turns renumbered 0..n-1; evidence mapped from original ids to the new ones."""
    new_turns = []
    for new_id, t in enumerate(turns):
        speaker, text = (t.speaker, t.text) if isinstance(t, Turn) else t
        new_turns.append(Turn(id=new_id, speaker=speaker, text=text))
    mapping = {old: new for new, old in enumerate(source_ids) if old is not None}
    evidence = frozenset(mapping[e] for e in d.evidence) if is_contradiction else frozenset()
    meta = {**d.meta, "transform": transform, "source_id": d.id,
            "source_turn_ids": list(source_ids), **(extra or {})}
    return _check(DecodeDialogue(id=f"{d.id}#{transform}", index=d.index, turns=tuple(new_turns),
                                 is_contradiction=is_contradiction, evidence=evidence,
                                 group=d.group, conversation=d.conversation, meta=meta),
                  f"{transform}({d.id})")


def a2t(dialogue: DecodeDialogue, pool: Sequence[DecodeDialogue],
        rng: random.Random) -> DecodeDialogue:
    """Add two turns: a consecutive pair of utterances from another dialogue of `pool`, chosen
    with `rng`, inserted right after the earliest evidence turn. Label and evidence are kept.
    Dialogues from the same conversation (DECODE's truncated copies share the part of
    `conversation_id` before "#") never serve as donors.

    Raises NotApplicable without contradiction evidence, ValueError without a donor (another
    dialogue with at least two turns).
    """
    _require_evidence(dialogue, "A2T")
    donors = [d for d in pool if len(d.turns) >= 2 and d.id != dialogue.id
              and (dialogue.conversation is None or d.conversation != dialogue.conversation)]
    if not donors:
        raise ValueError(f"A2T: no other dialogue with two turns to take utterances from "
                         f"(pool of {len(pool)})")
    donor = rng.choice(donors)
    k = rng.randrange(len(donor.turns) - 1)
    first = min(dialogue.evidence, key=dialogue.position)
    cut = dialogue.position(first) + 1
    ev_speaker = dialogue.turns[cut - 1].speaker
    others = [t.speaker for t in dialogue.turns if t.speaker != ev_speaker]
    other = others[0] if others else donor.turns[k].speaker
    inserted = [(other, donor.turns[k].text), (ev_speaker, donor.turns[k + 1].text)]
    turns = [*dialogue.turns[:cut], *inserted, *dialogue.turns[cut:]]
    source_ids = [t.id for t in dialogue.turns[:cut]] + [None, None] + \
                 [t.id for t in dialogue.turns[cut:]]
    return _renumbered(dialogue, turns, source_ids, True, "a2t",
                       {"inserted_from": donor.id,
                        "inserted_turn_ids": [donor.turns[k].id, donor.turns[k + 1].id]})


def rct_removed_ids(dialogue: DecodeDialogue) -> frozenset[int]:
    """The original turn ids RCT removes: each evidence turn and its partner (see the module
    docstring), never the last turn."""
    turns = dialogue.turns
    last = len(turns) - 1
    removed: set[int] = set()
    for e in dialogue.evidence:
        i = dialogue.position(e)
        removed.add(e)
        if i > 0 and turns[i - 1].speaker != turns[i].speaker:
            removed.add(turns[i - 1].id)
        elif i + 1 < last and turns[i + 1].speaker != turns[i].speaker:
            removed.add(turns[i + 1].id)
    removed.discard(turns[last].id)
    return frozenset(removed)


def rct(dialogue: DecodeDialogue) -> DecodeDialogue:
    """Remove the contradicting turns as whole speaker pairs; the label becomes
    non-contradiction and the evidence empty. Raises NotApplicable without evidence."""
    _require_evidence(dialogue, "RCT")
    removed = rct_removed_ids(dialogue)
    kept = [t for t in dialogue.turns if t.id not in removed]
    return _renumbered(dialogue, kept, [t.id for t in kept], False, "rct",
                       {"removed_turn_ids": sorted(removed)})


@dataclass(frozen=True)
class TransformResult:
    """A diagnostic set, the ids of the dialogues it skipped (not applicable) and of those it
    dropped after the transform for having no earlier turn by the last speaker (the official
    RCT set's filter: it keeps 2,011 of the 2,108 test contradictions)."""

    dialogues: tuple[DecodeDialogue, ...]
    skipped: tuple[str, ...]
    dropped: tuple[str, ...] = ()


def has_same_speaker_context(d: DecodeDialogue) -> bool:
    """Whether some earlier turn is by the last turn's speaker (else a structured detector has
    nothing to compare, and the official diagnostic sets leave the dialogue out)."""
    return any(t.speaker == d.last.speaker for t in d.turns[:-1])


def _filtered(out: list[DecodeDialogue], skipped: list[str]) -> TransformResult:
    kept = [d for d in out if has_same_speaker_context(d)]
    dropped = [d.meta.get("source_id", d.id) for d in out if not has_same_speaker_context(d)]
    return TransformResult(tuple(kept), tuple(skipped), tuple(dropped))


def transform_rng(seed: int, name: str, dialogue_id: str) -> random.Random:
    """The RNG for one dialogue: fixed by (seed, transform, dialogue id), not by set order."""
    return random.Random(f"{seed}:{name}:{dialogue_id}")


def a2t_set(dialogues: Sequence[DecodeDialogue], seed: int = 0,
            pool: Sequence[DecodeDialogue] | None = None) -> TransformResult:
    """A2T for every applicable dialogue; the donors come from `pool` (default: `dialogues`)."""
    donors = dialogues if pool is None else pool
    out, skipped = [], []
    for d in dialogues:
        try:
            out.append(a2t(d, donors, transform_rng(seed, "a2t", d.id)))
        except NotApplicable:
            skipped.append(d.id)
    return _filtered(out, skipped)


def rct_set(dialogues: Sequence[DecodeDialogue]) -> TransformResult:
    """RCT for every applicable dialogue (RCT draws nothing at random)."""
    out, skipped = [], []
    for d in dialogues:
        try:
            out.append(rct(d))
        except NotApplicable:
            skipped.append(d.id)
    return _filtered(out, skipped)
