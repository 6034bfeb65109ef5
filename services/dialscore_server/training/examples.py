"""DECODE-format dialogues as (premise, hypothesis, label) examples for training a detector,
built with the service's own pairing (:func:`~dialscore_server.contradiction.engine.pairing.plan_pairs`)
so that training inputs are exactly what the detector is later asked.

- ``pairs`` (utterance-based, the paper's structured setting): every earlier turn by the last
  speaker is paired with the last turn; the pair is a contradiction when the dialogue is one and
  that turn is among its evidence (DECODE's `aggregated_contradiction_indices`), else not. A
  contradiction without evidence annotations yields no pairs (its positive pair is unknown).
- ``unstructured``: one pair per dialogue, the whole history (speaker-marked lines) against the
  last turn, labelled with the dialogue's label.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from dialscore.evals.decode import DecodeDialogue

from dialscore_server.contradiction.engine.pairing import Turn, plan_pairs

Setting = Literal["pairs", "unstructured"]
SETTINGS: tuple[Setting, ...] = ("pairs", "unstructured")


@dataclass(frozen=True)
class Example:
    premise: str
    hypothesis: str
    contradiction: bool


def detector_examples(dialogues: Sequence[DecodeDialogue], setting: Setting) -> list[Example]:
    """The training examples of `dialogues` in `setting` (see the module docstring)."""
    if setting not in SETTINGS:
        raise ValueError(f"setting must be one of {', '.join(SETTINGS)}, got {setting!r}")
    out: list[Example] = []
    for d in dialogues:
        turns = [Turn(speaker=t.speaker, text=t.text, id=t.id) for t in d.turns]
        mode = "structured" if setting == "pairs" else "unstructured"
        planned = plan_pairs(turns, mode)
        if setting == "pairs" and d.is_contradiction and not d.evidence:
            continue
        for p in planned:
            label = d.is_contradiction if setting == "unstructured" else p.turn in d.evidence
            out.append(Example(p.premise, p.hypothesis, bool(label)))
    return out
