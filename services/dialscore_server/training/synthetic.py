"""A generated DECODE-format contradiction set for tests and demos: persona facts and their
negations in template dialogues.

Speaker "0" states a fact, two filler turns follow, and speaker "0"'s last turn either negates
the fact (a contradiction, with the fact's turn as evidence), restates it, or negates a *different*
fact that was never stated (a non-contradiction: a negation word alone does not make a
contradiction, so a model must compare the two utterances). Seeded and deterministic.
"""

from __future__ import annotations

import random

from dialscore.evals.decode import DecodeDialogue
from dialscore.types import Turn

FACTS: tuple[tuple[str, str], ...] = (
    ("i have a dog .", "i do not have a dog ."),
    ("i have a cat .", "i do not have a cat ."),
    ("i live in paris .", "i have never lived in paris ."),
    ("i live in tokyo .", "i have never lived in tokyo ."),
    ("i love coffee .", "i never drink coffee ."),
    ("i love tea .", "i never drink tea ."),
    ("i am a teacher .", "i am not a teacher ."),
    ("i am a nurse .", "i am not a nurse ."),
    ("i play the piano .", "i do not play the piano ."),
    ("i play the guitar .", "i do not play the guitar ."),
    ("i am married .", "i am not married ."),
    ("i have two kids .", "i do not have any kids ."),
)
FILLERS: tuple[str, ...] = ("that is nice .", "tell me more .", "oh really ?", "cool .",
                            "what else do you do ?", "i see .", "how fun .", "nice to hear .")


def contradiction_set(n: int, seed: int = 0) -> list[DecodeDialogue]:
    """`n` dialogues, half contradictions (see the module docstring)."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        k = rng.randrange(len(FACTS))
        fact, negation = FACTS[k]
        contradiction = i % 2 == 0
        if contradiction:
            last = negation
        elif rng.random() < 0.5:
            last = fact
        else:
            last = FACTS[rng.choice([j for j in range(len(FACTS)) if j != k])][1]
        texts = [fact, rng.choice(FILLERS), rng.choice(FILLERS), rng.choice(FILLERS), last]
        turns = tuple(Turn(id=j, speaker=str(j % 2), text=t) for j, t in enumerate(texts))
        out.append(DecodeDialogue(id=f"synthetic-{seed}-{i}", index=i, turns=turns,
                                  is_contradiction=contradiction,
                                  evidence=frozenset({0}) if contradiction else frozenset()))
    return out
