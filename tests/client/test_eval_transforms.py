"""DECODE diagnostic sets: A2T inserts two turns between the contradicting utterances and keeps
the label; RCT removes the evidence turns as whole speaker pairs and flips the label."""

from __future__ import annotations

import random

import pytest

from dialscore.evals.decode import DecodeDialogue, read_decode, write_decode
from dialscore.evals.decode_transforms import (NotApplicable, a2t, a2t_set, rct, rct_removed_ids,
                                               rct_set)
from dialscore.types import Turn


def _dialogue(ident, texts, contradiction=False, evidence=(), speakers=None):
    speakers = speakers or [str(i % 2) for i in range(len(texts))]
    turns = tuple(Turn(id=i, speaker=s, text=t) for i, (s, t) in enumerate(zip(speakers, texts)))
    return DecodeDialogue(id=ident, index=0, turns=turns, is_contradiction=contradiction,
                          evidence=frozenset(evidence), group="test")


# Speaker 1 says it has a dog (turn 1), later that it never had pets (turn 5, the last turn).
CONTRA = _dialogue("c1", ["hi there", "i walk my dog every day", "nice, what breed?",
                          "a beagle", "do you have other pets?", "i have never had a pet"],
                   contradiction=True, evidence={1})
DONORS = [_dialogue(f"d{i}", [f"donor {i} turn {k}" for k in range(4)]) for i in range(5)]
POOL = [CONTRA, *DONORS]


def test_a2t_inserts_two_unrelated_turns_between_the_contradicting_ones():
    out = a2t(CONTRA, POOL, random.Random(0))
    assert out.is_contradiction is True
    assert len(out.turns) == len(CONTRA.turns) + 2
    texts = [t.text for t in out.turns]
    # The evidence turn, then the two inserted ones, then the rest in order.
    assert texts[:2] == ["hi there", "i walk my dog every day"]
    assert texts[2].startswith("donor") and texts[3].startswith("donor")
    assert texts[4:] == [t.text for t in CONTRA.turns[2:]]
    # A consecutive pair from one donor dialogue.
    donor = next(d for d in DONORS if d.id == out.meta["inserted_from"])
    k = [t.text for t in donor.turns].index(texts[2])
    assert texts[3] == donor.turns[k + 1].text
    # Ids renumbered to positions; evidence still points at the same utterance, before the
    # inserted turns, and the last utterance is unchanged.
    assert [t.id for t in out.turns] == list(range(8))
    assert out.evidence == {1}
    ev = min(out.evidence)
    assert ev < 2 < 3 < out.last.id
    assert out.last.text == CONTRA.last.text
    assert out.meta["source_turn_ids"] == [0, 1, None, None, 2, 3, 4, 5]
    # Speakers keep alternating: the pair is (other speaker, evidence speaker).
    speakers = [t.speaker for t in out.turns]
    assert all(a != b for a, b in zip(speakers, speakers[1:]))
    assert out.id == "c1#a2t" and out.meta["transform"] == "a2t"


def test_a2t_goes_after_the_earliest_of_several_evidence_turns():
    d = _dialogue("c2", [f"u{i}" for i in range(8)], contradiction=True, evidence={5, 3})
    out = a2t(d, [d, *DONORS], random.Random(1))
    assert [t.text for t in out.turns[:4]] == ["u0", "u1", "u2", "u3"]
    assert out.turns[4].text.startswith("donor") and out.turns[5].text.startswith("donor")
    assert out.evidence == {3, 7}  # u3 stays at 3; u5 moves to 7
    assert out.turns[7].text == "u5"


def test_a2t_is_deterministic_under_a_seed():
    first = a2t_set([CONTRA, *DONORS], seed=7)
    again = a2t_set([CONTRA, *DONORS], seed=7)
    assert first == again
    assert [t.text for t in first.dialogues[0].turns] == [t.text for t in again.dialogues[0].turns]
    # Only the contradiction with evidence qualifies; the others are skipped and counted.
    assert len(first.dialogues) == 1 and first.skipped == tuple(d.id for d in DONORS)
    # A different seed may pick other utterances, but one dialogue's result does not depend on
    # the rest of the set being transformed with it.
    alone = a2t_set([CONTRA], seed=7, pool=[CONTRA, *DONORS])
    assert alone.dialogues == first.dialogues
    texts = {tuple(t.text for t in a2t_set([CONTRA], seed=s, pool=POOL).dialogues[0].turns)
             for s in range(10)}
    assert len(texts) > 1


def test_a2t_never_takes_utterances_from_the_same_conversation():
    same = [DecodeDialogue(id=f"s{i}", index=0, turns=d.turns, is_contradiction=False,
                           conversation="conv-1") for i, d in enumerate(DONORS)]
    other = DecodeDialogue(id="o", index=0, turns=DONORS[0].turns, is_contradiction=False,
                           conversation="conv-2")
    mine = DecodeDialogue(id="c1", index=0, turns=CONTRA.turns, is_contradiction=True,
                          evidence=CONTRA.evidence, conversation="conv-1")
    for seed in range(5):
        assert a2t(mine, [mine, *same, other], random.Random(seed)).meta["inserted_from"] == "o"
    with pytest.raises(ValueError, match="no other dialogue"):
        a2t(mine, [mine, *same], random.Random(0))


def test_a2t_needs_evidence_and_a_donor():
    with pytest.raises(NotApplicable):
        a2t(DONORS[0], POOL, random.Random(0))
    with pytest.raises(ValueError, match="no other dialogue"):
        a2t(CONTRA, [CONTRA], random.Random(0))


def test_rct_removes_the_evidence_with_its_partner_and_flips_the_label():
    out = rct(CONTRA)
    # Evidence turn 1 goes with turn 0, the other speaker's utterance it answers.
    assert out.meta["removed_turn_ids"] == [0, 1]
    assert [t.text for t in out.turns] == [t.text for t in CONTRA.turns[2:]]
    assert out.is_contradiction is False and out.evidence == frozenset()
    assert [t.id for t in out.turns] == list(range(4))
    assert out.last.text == CONTRA.last.text
    speakers = [t.speaker for t in out.turns]
    assert all(a != b for a, b in zip(speakers, speakers[1:]))


def test_rct_with_several_evidence_turns_and_a_first_turn_evidence():
    # Speaker 0 contradicts itself at the end (turn 6); evidence turns 0 and 4.
    d = _dialogue("c3", [f"u{i}" for i in range(7)], contradiction=True, evidence={0, 4})
    assert rct_removed_ids(d) == {0, 1, 3, 4}  # 0 has no predecessor: paired with 1; 4 with 3
    out = rct(d)
    assert [t.text for t in out.turns] == ["u2", "u5", "u6"]
    speakers = [t.speaker for t in out.turns]
    assert all(a != b for a, b in zip(speakers, speakers[1:]))


def test_rct_never_removes_the_last_utterance():
    # The evidence is the first turn, so its partner would be the turn after it: the last one.
    d = _dialogue("c4", ["a", "b"], contradiction=True, evidence={0})
    assert rct_removed_ids(d) == {0}
    out = rct(d)
    assert [t.text for t in out.turns] == ["b"]
    assert out.is_contradiction is False and out.evidence == frozenset()


def test_rct_set_is_deterministic_and_skips_non_applicable():
    result = rct_set([CONTRA, *DONORS])
    assert result == rct_set([CONTRA, *DONORS])
    assert len(result.dialogues) == 1 and len(result.skipped) == len(DONORS)
    with pytest.raises(NotApplicable):
        rct(DONORS[0])


def test_transformed_sets_round_trip_through_the_decode_format(tmp_path):
    sets = [a2t(CONTRA, POOL, random.Random(3)), rct(CONTRA)]
    path = write_decode(tmp_path / "diag.jsonl", sets)
    back = read_decode(path)
    assert [(d.id, d.is_contradiction, d.evidence) for d in back] == \
           [(d.id, d.is_contradiction, d.evidence) for d in sets]
    assert [[t.text for t in d.turns] for d in back] == [[t.text for t in d.turns] for d in sets]
    assert back[0].group == "test"


def test_request_body_for_the_service():
    assert CONTRA.to_request()["turns"][:2] == [
        {"id": 0, "speaker": "0", "text": "hi there"},
        {"id": 1, "speaker": "1", "text": "i walk my dog every day"}]


def test_derived_sets_drop_dialogues_without_a_turn_of_the_last_speaker():
    from dialscore.evals.decode import DecodeDialogue
    from dialscore.evals.decode_transforms import rct_set
    from dialscore.types import Turn

    def d(ident, n):
        turns = tuple(Turn(id=i, speaker=str(i % 2), text=f"{ident} u{i}") for i in range(n))
        return DecodeDialogue(id=ident, index=0, turns=turns, is_contradiction=True,
                              evidence=frozenset({0}))
    # 3 turns (0 1 0): RCT removes 0 and its partner 1, leaving the last turn alone: dropped.
    # 5 turns: removes 0 and 1, keeps 2 3 4 (speaker 0 still has turn 2): kept.
    result = rct_set([d("short", 3), d("long", 5)])
    assert [x.meta["source_id"] for x in result.dialogues] == ["long"]
    assert result.dropped == ("short",) and result.skipped == ()
