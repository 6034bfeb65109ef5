"""DECODE data (jsonl) as detector input, and the spec's metrics (spec section 3).

Each line holds ``turns`` (each with ``turn_id``, ``agent_id``, ``text``), ``is_contradiction``
(about the last turn) and ``aggregated_contradiction_indices`` (turn ids of the evidence, which
include the last turn's own id; that id is dropped here, as it is not itself evidence).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dialscore_server.contradiction.pairing import DetectionResult, Turn, TurnId


@dataclass(frozen=True)
class DecodeExample:
    """One DECODE dialogue: turns (speaker = ``agent_id``, id = ``turn_id``) and gold labels.

    `evidence` is the gold evidence: the aggregated contradiction indices without the last turn.
    """

    record_id: str
    turns: tuple[Turn, ...]
    is_contradiction: bool
    evidence: frozenset[TurnId]

    def request_dialogue(self) -> dict[str, Any]:
        """The dialogue as POST /v1/contradiction JSON: ``{"turns": [{"id", "speaker", "text"}]}``."""
        return {"turns": [{"id": t.id, "speaker": t.speaker, "text": t.text} for t in self.turns]}


def parse_decode_record(record: Mapping[str, Any]) -> DecodeExample:
    """One jsonl record as a :class:`DecodeExample`."""
    turns = tuple(Turn(speaker=t["agent_id"], text=t["text"], id=t["turn_id"]) for t in record["turns"])
    last = turns[-1].id if turns else None
    gold = frozenset(i for i in record.get("aggregated_contradiction_indices") or () if i != last)
    return DecodeExample(
        record_id=str(record.get("record_id") or record.get("conversation_id") or ""),
        turns=turns, is_contradiction=bool(record["is_contradiction"]), evidence=gold,
    )


def read_decode(path: str | Path, limit: int | None = None) -> Iterator[DecodeExample]:
    """The examples of a DECODE jsonl file, in file order (the first `limit` when given)."""
    with open(path, encoding="utf-8") as f:
        n = 0
        for line in f:
            if not line.strip():
                continue
            if limit is not None and n >= limit:
                return
            yield parse_decode_record(json.loads(line))
            n += 1


@dataclass(frozen=True)
class DecodeMetrics:
    """Accuracy on the 2-way label; strict accuracy (label and evidence set both exactly right);
    supporting-evidence precision/recall/F1 over (dialogue, earlier turn) pairs."""

    n: int
    accuracy: float
    strict_accuracy: float
    evidence_precision: float
    evidence_recall: float
    evidence_f1: float
    fire_rate: float


def decode_metrics(examples: Sequence[DecodeExample], results: Sequence[DetectionResult]) -> DecodeMetrics:
    """The spec's metrics for `results` (one per example, same order)."""
    if len(examples) != len(results):
        raise ValueError("one result per example is needed")
    correct = strict = tp = n_pred = n_gold = fired = 0
    for ex, res in zip(examples, results):
        predicted = {e.turn for e in res.evidence}
        ok = res.is_contradiction == ex.is_contradiction
        correct += ok
        strict += ok and predicted == set(ex.evidence)
        tp += len(predicted & ex.evidence)
        n_pred += len(predicted)
        n_gold += len(ex.evidence)
        fired += res.is_contradiction
    n = len(examples)
    p = tp / n_pred if n_pred else 0.0
    r = tp / n_gold if n_gold else 0.0
    return DecodeMetrics(
        n=n, accuracy=correct / n if n else 0.0, strict_accuracy=strict / n if n else 0.0,
        evidence_precision=p, evidence_recall=r, evidence_f1=2 * p * r / (p + r) if p + r else 0.0,
        fire_rate=fired / n if n else 0.0,
    )
