"""POST /v1/contradiction: request and response schemas (the descriptions become the OpenAPI docs).

The turn schema (:class:`TurnIn`) and its id-uniqueness check are shared with POST /v1/rerank.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Literal

from pydantic import Field, field_validator

from dialscore_server.contract.priority import PriorityField
from dialscore_server.contradiction.engine.pairing import (
    DEFAULT_THRESHOLD, DetectionJob, DetectionResult, Evidence, Turn,
)
from dialscore_server.contract.limits import Limits, check_ids, check_texts, too_costly, too_many
from dialscore_server.contract.schema import APIModel, Text, limited

Probability = Annotated[float, Field(ge=0.0, le=1.0, allow_inf_nan=False)]
SpeakerIn = Annotated[int | str, Field(
    description="Who said the turn: any string or integer (1 and \"1\" are different speakers).")]
TurnIdIn = Annotated[int | str, Field(description="A turn id, unique within its dialogue.")]


class TurnIn(APIModel):
    """One utterance."""

    id: TurnIdIn | None = Field(
        None, description="The turn's id, unique within the dialogue; evidence names turns by it. "
        "Default: the turn's 0-based position in the dialogue.")
    speaker: SpeakerIn
    text: Text = Field(description="What was said.")

    def to_turn(self) -> Turn:
        return Turn(speaker=self.speaker, text=self.text, id=self.id)


def same_speaker(a: object, b: object) -> bool:
    """Speakers are equal only with the same type (1 and "1" differ, True is not 1)."""
    return type(a) is type(b) and a == b


def structured_pairs(speakers: Sequence[object], last: object) -> int:
    """How many of `speakers` (the earlier turns') are `last`'s: the structured-mode pairs."""
    return sum(1 for s in speakers if same_speaker(s, last))


def turn_ids_and_speakers(turns: Sequence[TurnIn], field: str) -> list[tuple[str, object]]:
    """(field path, value) of each turn's id and speaker, for the id length limit."""
    out: list[tuple[str, object]] = []
    for j, t in enumerate(turns):
        out += [(f"{field}[{j}].id", t.id), (f"{field}[{j}].speaker", t.speaker)]
    return out


def capped_evidence(evidence: Sequence[Evidence], limit: int | None) -> list[Evidence]:
    """At most `limit` evidence turns: the most probable ones, kept in dialogue order."""
    if limit is None or len(evidence) <= limit:
        return list(evidence)
    keep = sorted(range(len(evidence)), key=lambda k: -evidence[k].probability)[:limit]
    return [evidence[k] for k in sorted(keep)]


def unique_turn_ids(turns: Sequence[TurnIn], field: str = "turns") -> None:
    """Raise ValueError naming ``{field}[j].id`` when two turns share an (effective) id."""
    seen: dict[int | str, int] = {}
    for j, t in enumerate(turns):
        tid = j if t.id is None else t.id
        if tid in seen:
            raise ValueError(
                f"turn ids must be unique within a dialogue: {field}[{j}].id is {tid!r}, like "
                f"{field}[{seen[tid]}] (a turn without an id is identified by its position)")
        seen[tid] = j


class DialogueIn(APIModel):
    turns: Annotated[list[TurnIn], Field(min_length=1), limited("max_turns")] = Field(
        description="The dialogue, oldest turn first; the last turn is the one tested.")

    @field_validator("turns")
    @classmethod
    def _unique_ids(cls, turns: list[TurnIn]) -> list[TurnIn]:
        unique_turn_ids(turns, "turns")
        return turns

    def to_turns(self) -> list[Turn]:
        return [t.to_turn() for t in self.turns]


class ContradictionRequest(APIModel):
    model: str | None = Field(
        None, description="A classifier model name from GET /v1/models (default: the deployment's "
        "detector).")
    priority: int | None = PriorityField
    mode: Literal["structured", "unstructured"] = Field(
        "structured", description="structured: pair the last turn with each earlier turn of the same "
        "speaker (evidence by turn id). unstructured: one pair, all earlier turns as "
        "`speaker: text` lines as the premise (no evidence).")
    threshold: Probability = Field(
        DEFAULT_THRESHOLD, description="is_contradiction = probability > threshold.")
    evidence_threshold: Probability | None = Field(
        None, description="A turn is evidence when its pair probability > evidence_threshold "
        "(default: threshold).")
    dialogues: Annotated[list[DialogueIn], Field(min_length=1), limited("max_dialogues")] = Field(
        description="Dialogues to test; results come back in the same order.")

    def to_job(self) -> DetectionJob:
        return DetectionJob(dialogues=[d.to_turns() for d in self.dialogues], mode=self.mode,
                            threshold=self.threshold, evidence_threshold=self.evidence_threshold)

    def texts(self) -> list[tuple[str, str]]:
        """(field path, text) pairs, for the character limit."""
        return [(f"dialogues[{i}].turns[{j}].text", t.text)
                for i, d in enumerate(self.dialogues) for j, t in enumerate(d.turns)]

    def pairs(self) -> int:
        """The NLI pairs this request costs, from the turns' speakers alone (pairing.plan_pairs
        forms exactly these)."""
        if self.mode == "unstructured":
            return sum(1 for d in self.dialogues if len(d.turns) > 1)
        return sum(structured_pairs([t.speaker for t in d.turns[:-1]], d.turns[-1].speaker)
                   for d in self.dialogues)

    def check_limits(self, limits: Limits) -> None:
        """Raise ``payload_too_large`` (413) naming the field for a request over `limits`: sizes,
        id lengths, then its cost in NLI pairs (``max_request_pairs``, param ``dialogues``)."""
        if len(self.dialogues) > limits.max_dialogues:
            raise too_many("dialogues", len(self.dialogues), limits.max_dialogues, "dialogues")
        for i, d in enumerate(self.dialogues):
            if len(d.turns) > limits.max_turns:
                raise too_many(f"dialogues[{i}].turns", len(d.turns), limits.max_turns, "turns")
        check_texts(self.texts(), limits)
        for i, d in enumerate(self.dialogues):
            check_ids(turn_ids_and_speakers(d.turns, f"dialogues[{i}].turns"), limits)
        pairs = self.pairs()
        if pairs > limits.max_request_pairs:
            raise too_costly("dialogues", pairs, limits.max_request_pairs, "NLI pairs")


class EvidenceOut(APIModel):
    turn: int | str = Field(description="Id of an earlier turn of the same speaker.")
    probability: float = Field(description="Contradiction probability of (that turn, last turn).")

    @classmethod
    def from_engine(cls, e: Evidence) -> "EvidenceOut":
        return cls(turn=e.turn, probability=e.probability)


class ContradictionResultOut(APIModel):
    is_contradiction: bool = Field(description="probability > threshold.")
    probability: float = Field(
        description="Largest pair contradiction probability (0.0 when nothing was compared).")
    evidence: list[EvidenceOut] = Field(
        description="Earlier turns whose pair probability > evidence_threshold, in dialogue order "
        "(always empty in unstructured mode); at most `max_evidence` of them, the most probable.")
    num_pairs: int = Field(description="Pairs classified for this dialogue.")

    @classmethod
    def from_engine(cls, r: DetectionResult, max_evidence: int | None = None) -> "ContradictionResultOut":
        return cls(is_contradiction=r.is_contradiction, probability=r.probability,
                   evidence=[EvidenceOut.from_engine(e) for e in capped_evidence(r.evidence, max_evidence)],
                   num_pairs=r.num_pairs)


class ContradictionResponse(APIModel):
    model: str
    source: str | None = Field(None, description="The checkpoint: hub id or path.")
    revision: str | None = Field(None, description="Resolved revision, when known.")
    stand_in: bool = Field(description="True when the model is a random-weight stand-in.")
    mode: Literal["structured", "unstructured"]
    threshold: float
    evidence_threshold: float = Field(description="The evidence threshold applied.")
    results: list[ContradictionResultOut]

    @classmethod
    def from_engine(cls, request: ContradictionRequest, results: Sequence[DetectionResult], *,
                    model: str, stand_in: bool, source: str | None = None,
                    revision: str | None = None, max_evidence: int | None = None
                    ) -> "ContradictionResponse":
        ev = request.threshold if request.evidence_threshold is None else request.evidence_threshold
        return cls(model=model, source=source, revision=revision, stand_in=stand_in,
                   mode=request.mode, threshold=request.threshold, evidence_threshold=ev,
                   results=[ContradictionResultOut.from_engine(r, max_evidence) for r in results])
