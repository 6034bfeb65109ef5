"""The DECODE diagnostic sets, A2T and RCT, derived from dialogues labelled contradiction.

Only dialogues labelled contradiction with evidence qualify; the others are skipped and counted.
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

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dialscore.evals.decode import DecodeDialogue, checked
from dialscore.types import Turn


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
    return checked(DecodeDialogue(id=f"{d.id}#{transform}", index=d.index, turns=tuple(new_turns),
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
