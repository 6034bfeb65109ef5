"""DECODE contradiction detection: the data, its reader and writer, and the wire types.

Data (JSON Lines, one dialogue per line): `turns` (each with `turn_id`, `agent_id`, `text`),
`is_contradiction` (about the last turn) and `aggregated_contradiction_indices`, the turn ids of
the evidence. That list includes the last turn's own id, which is not evidence: `read_decode`
drops it, so `DecodeDialogue.evidence` holds only earlier turns. Turns are identified by their
`turn_id`, never by position or parity.

Wire format. `DecodeDialogue.to_request()` is what a runner sends to the contradiction service,
`{"turns": [{"id", "speaker", "text"}, ...]}`, and `Prediction.from_response(body)` reads back
`{"is_contradiction", "probability", "evidence": [{"turn", "probability"}, ...]}`.

The metrics are :mod:`dialscore.evals.decode_metrics`'; the A2T and RCT diagnostic sets
:mod:`dialscore.evals.decode_transforms`'.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from dialscore.reporting.rows import write_jsonl
from dialscore.types import Turn


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


def checked(d: DecodeDialogue, where: str) -> DecodeDialogue:
    """`d`, or a ValueError naming `where` when it is not a valid DECODE dialogue: no turns,
    repeated turn ids, evidence that is not an earlier turn, or evidence on a non-contradiction."""
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
    return checked(DecodeDialogue(id=str(ident), index=index, turns=turns, is_contradiction=label,
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
