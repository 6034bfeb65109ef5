"""DECODE pairing: which (premise, hypothesis) pairs a dialogue's last utterance is tested with,
and the verdict drawn from their contradiction probabilities (spec section 3). Pure Python: no
model, no torch.

A dialogue is a sequence of turns ``u_0..u_n``, each with a speaker (any string or integer; ``1``
and ``"1"`` are different speakers) and an id (its ``id`` when given, else its 0-based position in
the dialogue). Turns are always named by id, never by position parity: dialogues need not
alternate and may have any number of speakers.

* **Structured mode** (the default; DECODE's utterance-based detector). Let ``s`` be the speaker of
  the last turn ``u_n``. Every earlier turn ``u_i`` (``i < n``) whose speaker is ``s`` is paired
  as (premise ``u_i``, hypothesis ``u_n``); turns of every other speaker are ignored. The dialogue's
  ``probability`` is the maximum pair probability; ``is_contradiction`` is ``probability >
  threshold`` (strictly greater; default 0.5); ``evidence`` lists, in dialogue order, the ids of
  the turns whose pair probability is ``> evidence_threshold`` (default: ``threshold``), each with
  its pair probability. Evidence is computed independently of the label: with the default
  ``evidence_threshold`` it is non-empty exactly when ``is_contradiction`` is true; with a lower one
  a non-contradiction may still carry evidence.
* **Unstructured mode** (DECODE's baseline). One pair per dialogue: the premise is every earlier
  turn, oldest first, each written ``f"{speaker}: {text}"`` (the speaker as ``str(speaker)``,
  then a colon and one space), joined with ``"\\n"``; the hypothesis is ``u_n``'s text, without a
  marker. ``probability`` is that pair's probability. ``evidence`` is always empty: one pair cannot
  say which earlier turn is contradicted.
* **Nothing to compare.** A one-turn dialogue, or (structured) a last speaker with no earlier turn,
  is valid: ``probability`` 0.0, not a contradiction, no evidence, and no pair is classified.

A pair probability is P(contradiction | premise, hypothesis) from a
:class:`~dialscore_server.contradiction.engine.classifier.PairClassifier`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from dialscore_server.contract.errors import InputError

Mode = Literal["structured", "unstructured"]
MODES: tuple[Mode, ...] = ("structured", "unstructured")
Speaker = int | str
TurnId = int | str

#: Default decision threshold τ on the contradiction probability (spec section 3).
DEFAULT_THRESHOLD = 0.5


# ------------------------------------------------------------------------------------ data types
@dataclass(frozen=True)
class Turn:
    """One utterance. `id` defaults to the turn's 0-based position in its dialogue."""

    speaker: Speaker
    text: str
    id: TurnId | None = None


@dataclass(frozen=True)
class Evidence:
    """An earlier turn (by id) whose pair with the last turn scored `probability` > the evidence
    threshold."""

    turn: TurnId
    probability: float


@dataclass(frozen=True)
class DetectionResult:
    """The verdict on one dialogue's last turn. See the module docstring for the exact contract.

    `probability` is the largest pair contradiction probability (0.0 when no pair was formed);
    `num_pairs` is how many (premise, hypothesis) pairs were classified for this dialogue.
    """

    is_contradiction: bool
    probability: float
    evidence: tuple[Evidence, ...]
    num_pairs: int


@dataclass(frozen=True)
class DetectionJob:
    """Dialogues that share one setting of mode and thresholds (typically one HTTP request).

    `evidence_threshold` None means "the same as `threshold`".
    """

    dialogues: Sequence[Sequence[Turn]]
    mode: Mode = "structured"
    threshold: float = DEFAULT_THRESHOLD
    evidence_threshold: float | None = None


@dataclass(frozen=True)
class PlannedPair:
    """One pair to classify. `turn` is the premise turn's id (structured), None (unstructured)."""

    turn: TurnId | None
    premise: str
    hypothesis: str


# ------------------------------------------------------------------------------------ pairing
def turn_ids(turns: Sequence[Turn], param: str = "turns") -> list[TurnId]:
    """Each turn's effective id (its `id`, else its position), checked unique within the dialogue.

    Raises :class:`InputError` naming ``{param}[j].id`` for a repeated id.
    """
    ids: list[TurnId] = []
    seen: dict[TurnId, int] = {}
    for j, turn in enumerate(turns):
        tid = j if turn.id is None else turn.id
        # 1 and True hash alike; ids are ints or strings, never booleans.
        if isinstance(tid, bool) or not isinstance(tid, (int, str)):
            raise InputError(f"turn id must be an integer or a string, got {tid!r}",
                                    f"{param}[{j}].id")
        if tid in seen:
            raise InputError(
                f"turn ids must be unique within a dialogue: {param}[{j}] has id {tid!r}, like "
                f"{param}[{seen[tid]}] (a turn without an id is identified by its position)",
                f"{param}[{j}].id")
        seen[tid] = j
        ids.append(tid)
    return ids


def speaker_marker(speaker: Speaker) -> str:
    """The prefix of one earlier turn in the unstructured premise: ``f"{speaker}: "``."""
    return f"{speaker}: "


def unstructured_premise(turns: Sequence[Turn]) -> str:
    """Earlier turns, oldest first, as ``"{speaker}: {text}"`` lines joined with ``"\\n"``."""
    return "\n".join(speaker_marker(t.speaker) + t.text for t in turns)


def plan_pairs(turns: Sequence[Turn], mode: Mode = "structured", param: str = "turns") -> list[PlannedPair]:
    """The pairs classified for one dialogue (see the module docstring), in dialogue order.

    Raises :class:`InputError` for an empty dialogue, a repeated id or an unknown mode.
    """
    if mode not in MODES:
        raise InputError(f"mode must be one of {', '.join(MODES)}; got {mode!r}", "mode")
    if not turns:
        raise InputError("a dialogue needs at least one turn", param)
    ids = turn_ids(turns, param)
    last = turns[-1]
    earlier = turns[:-1]
    if mode == "unstructured":
        if not earlier:
            return []
        return [PlannedPair(None, unstructured_premise(earlier), last.text)]
    return [
        PlannedPair(ids[i], turn.text, last.text)
        for i, turn in enumerate(earlier)
        if _same_speaker(turn.speaker, last.speaker)
    ]


def _same_speaker(a: Speaker, b: Speaker) -> bool:
    # Strict: 1 == "1" is False already; also keep True from matching 1.
    return type(a) is type(b) and a == b


# ------------------------------------------------------------------------------------ verdict
def check_threshold(value: float, param: str) -> float:
    """`value` as a float; :class:`InputError` naming `param` unless it is a number in [0, 1]."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
        raise InputError(f"{param} must be a number in [0, 1]; got {value!r}", param)
    return float(value)


def verdict(pairs: Sequence[PlannedPair], probs: Sequence[float], threshold: float,
            evidence_threshold: float, mode: Mode) -> DetectionResult:
    """The result for one dialogue from its planned pairs and their probabilities, in the same
    order (see the module docstring). Raises ``RuntimeError`` for a value that is not a
    probability (a classifier bug, not bad input)."""
    for p in probs:
        if math.isnan(p) or not 0.0 <= p <= 1.0:
            raise RuntimeError(f"classifier returned {p!r}, not a probability")
    probability = max(probs, default=0.0)
    evidence = () if mode == "unstructured" else tuple(
        Evidence(pair.turn, p) for pair, p in zip(pairs, probs)
        if p > evidence_threshold and pair.turn is not None)
    return DetectionResult(probability > threshold, probability, evidence, len(pairs))
