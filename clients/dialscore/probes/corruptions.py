"""The six corruptions of a valid explanation "A <connective> C" (spec section 2).

=========  ========  ===================================================================
type       category  corrupted text
=========  ========  ===================================================================
swapped    logical   "C <connective> A"
negation   logical   connective negated: causes -> does not cause, motivates -> does not
                     motivate, enables -> does not enable, causes/enables -> does not
                     cause/enable
incorrect  logical   an explanation of the same dialogue that failed verification
                     (``valid: false``), drawn at random; instances without one are
                     skipped and counted
shuffle    complete  the words of the whole explanation in a random order that differs
                     from the original
dropped    complete  30% of the words (rounded half up, at least one, never all) removed,
                     chosen uniformly at random; the rest keep their order
reversed   complete  the word order reversed
=========  ========  ===================================================================

Words are whitespace-separated tokens of :attr:`Explanation.text` (punctuation stays attached).

**Determinism.** Randomness never comes from global state: every (dialogue, explanation,
corruption) gets its own :class:`random.Random`, seeded from a SHA-256 of
``[seed, dialogue id, explanation index, corruption]`` (:func:`instance_rng`), and only its
``random()`` method is used (the one Python guarantees to reproduce across versions), so a
corruption depends on nothing but the seed and the instance, whatever else is run or in what order.

**Skips.** A corruption that cannot produce a text different from the valid one (no invalid
explanation for ``incorrect``; a one-word explanation for ``dropped``; a text whose shuffle or
reversal is itself; antecedent equal to consequent for ``swapped``) is skipped, and the skip is
counted by (corruption, reason) in :attr:`CorruptionSet.skipped`: an identical pair would be a
guaranteed tie, which says nothing about the model.

**Sampling** (:data:`SAMPLINGS`, the ``sampling`` argument of :func:`corrupt_dialogues`):

* ``all`` (the default): every requested corruption type of every valid explanation, one pair
  each. Each type's accuracy is then measured on every explanation that allows it (six times the
  pairs per type of a one-per-explanation draw), and the paper's estimand is the same in
  expectation. A category's pairs weigh the types by how often each can be made: in the sample,
  ``incorrect`` has material for 116 of 156 explanations, so it makes 27% of the logical pairs,
  not a third.
* ``one-per-explanation``: CEDAR's protocol ("for each human-validated explanation, we generate a
  corrupted version using one of our six corruption types"): exactly one pair per valid
  explanation, its type drawn uniformly among the requested types that can be made for it (a
  type without material is left out of that explanation's draw and counted in ``skipped`` as
  above; an explanation that allows no type gets no pair and is counted under ``"*"``). The draw
  uses its own generator, ``instance_rng(seed, dialogue id, explanation index, "draw")``, and the
  drawn pair is the very pair ``all`` makes for that type, so a one-per-explanation run is a
  subset of the ``all`` run of the same seed and reuses its stored scores.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field

from dialscore.probes.data import Dialogue, Explanation

__all__ = ["ALL_TYPES", "CATEGORY", "COMPLETE", "CORRUPTIONS", "DROP_RATE", "LOGICAL", "NEGATED",
           "ONE_PER_EXPLANATION", "SAMPLINGS", "CorruptedPair", "CorruptionSet", "corrupt", "corrupt_dialogues", "drop_words",
           "instance_rng", "negation", "permutation", "reverse_words", "shuffle_words", "swapped"]

LOGICAL: tuple[str, ...] = ("swapped", "negation", "incorrect")
COMPLETE: tuple[str, ...] = ("shuffle", "dropped", "reversed")
CORRUPTIONS: tuple[str, ...] = LOGICAL + COMPLETE
CATEGORY: dict[str, str] = {**{c: "logical" for c in LOGICAL}, **{c: "complete" for c in COMPLETE}}
NEGATED: dict[str, str] = {
    "causes": "does not cause",
    "motivates": "does not motivate",
    "enables": "does not enable",
    "causes/enables": "does not cause/enable",
}
DROP_RATE = 0.3
#: Every requested corruption type of every valid explanation (the default).
ALL_TYPES = "all"
#: CEDAR's protocol: one type per valid explanation, drawn uniformly among those it allows.
ONE_PER_EXPLANATION = "one-per-explanation"
SAMPLINGS: tuple[str, ...] = (ALL_TYPES, ONE_PER_EXPLANATION)
#: The label of the draw's generator (:func:`instance_rng`); not a corruption name.
DRAW = "draw"
_SHUFFLE_TRIES = 100


def instance_rng(seed: int, *parts: str | int) -> random.Random:
    """A generator of its own for one instance, from the run's seed and the instance's ids."""
    digest = hashlib.sha256(json.dumps([seed, *parts], ensure_ascii=False).encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


def permutation(n: int, rng: random.Random) -> list[int]:
    """A uniformly random permutation of ``range(n)`` (Fisher-Yates on ``rng.random()`` only)."""
    order = list(range(n))
    for i in range(n - 1, 0, -1):
        j = int(rng.random() * (i + 1))
        order[i], order[j] = order[j], order[i]
    return order


def swapped(e: Explanation) -> str | None:
    """``"C <connective> A"``; None when antecedent and consequent are the same text."""
    if e.antecedent.strip() == e.consequent.strip():
        return None
    return f"{e.consequent.strip()} {e.connective} {e.antecedent.strip()}"


def negation(e: Explanation) -> str:
    """The connective negated: ``"A does not cause C"``."""
    return f"{e.antecedent.strip()} {NEGATED[e.connective]} {e.consequent.strip()}"


def shuffle_words(text: str, rng: random.Random) -> str | None:
    """The words in a random order different from the original; None when every order reads
    the same (one word, or all words equal)."""
    words = text.split()
    if len(set(words)) < 2:
        return None
    for _ in range(_SHUFFLE_TRIES):
        out = " ".join(words[i] for i in permutation(len(words), rng))
        if out != " ".join(words):
            return out
    return None  # pragma: no cover - probability below 2**-100


def n_dropped(n_words: int, rate: float = DROP_RATE) -> int:
    """How many of ``n_words`` words the ``dropped`` corruption removes: ``rate * n`` rounded half
    up, at least one and at most ``n - 1`` (0 for a one-word text)."""
    if n_words < 2:
        return 0
    k = int(rate * n_words + 0.5 + 1e-9)
    return min(n_words - 1, max(1, k))


def drop_words(text: str, rng: random.Random, rate: float = DROP_RATE) -> str | None:
    """``text`` with :func:`n_dropped` words removed uniformly at random (the others keep their
    order); None for a one-word text."""
    words = text.split()
    k = n_dropped(len(words), rate)
    if k == 0:
        return None
    gone = set(permutation(len(words), rng)[:k])
    return " ".join(w for i, w in enumerate(words) if i not in gone)


def reverse_words(text: str) -> str | None:
    """The words in reverse order; None when that reads the same as the original."""
    words = text.split()
    out = " ".join(reversed(words))
    return None if out == " ".join(words) else out


@dataclass(frozen=True)
class CorruptedPair:
    """A valid explanation and one corruption of it: the unit every probe compares."""

    dialogue_id: str
    dataset: str
    explanation_index: int
    dimension: str
    corruption: str
    category: str
    valid_text: str
    corrupted_text: str
    #: For ``incorrect``: the index of the invalid explanation used; otherwise None.
    source_index: int | None = None

    @property
    def pair_key(self) -> str:
        """Stable id of the pair within a data file (model and setting are added by the runner)."""
        return f"{self.dialogue_id}|e{self.explanation_index}|{self.corruption}"

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class CorruptionSet:
    """The corrupted pairs of a data set under one ``sampling`` (:data:`SAMPLINGS`), and the
    corruptions that could not be made, counted by ``(corruption, reason)``."""

    pairs: list[CorruptedPair] = field(default_factory=list)
    skipped: Counter = field(default_factory=Counter)
    sampling: str = ALL_TYPES

    def skipped_rows(self) -> list[dict]:
        return [{"corruption": c, "reason": r, "count": n} for (c, r), n in sorted(self.skipped.items())]


def corrupt(dialogue: Dialogue, index: int, corruption: str,
            seed: int) -> tuple[str | None, int | None, str | None]:
    """Corrupt explanation ``index`` of ``dialogue``: ``(text, source_index, skip_reason)``,
    with ``text`` None (and the reason) when the corruption is skipped."""
    e = dialogue.explanations[index]
    rng = instance_rng(seed, dialogue.id, index, corruption)
    if corruption == "swapped":
        text = swapped(e)
        return text, None, None if text else "antecedent equals consequent"
    if corruption == "negation":
        return negation(e), None, None
    if corruption == "incorrect":
        invalid = [i for i, x in enumerate(dialogue.explanations) if not x.valid]
        if not invalid:
            return None, None, "no invalid explanation in the dialogue"
        pick = invalid[int(rng.random() * len(invalid))]
        if dialogue.explanations[pick].text == e.text:
            return None, None, "invalid explanation identical to the valid one"
        return dialogue.explanations[pick].text, pick, None
    if corruption == "shuffle":
        text = shuffle_words(e.text, rng)
        return text, None, None if text else "no other word order"
    if corruption == "dropped":
        text = drop_words(e.text, rng)
        return text, None, None if text else "fewer than two words"
    if corruption == "reversed":
        text = reverse_words(e.text)
        return text, None, None if text else "reads the same reversed"
    raise ValueError(f"unknown corruption {corruption!r}; expected one of {', '.join(CORRUPTIONS)}")


def corrupt_dialogues(dialogues: Iterable[Dialogue], seed: int,
                      corruptions: Sequence[str] = CORRUPTIONS,
                      sampling: str = ALL_TYPES) -> CorruptionSet:
    """The corrupted pairs of every valid explanation of every dialogue, in data order (for each
    explanation in the order of `corruptions`): every type with ``sampling="all"``, one drawn
    type with ``"one-per-explanation"`` (module docstring)."""
    unknown = [c for c in corruptions if c not in CATEGORY]
    if unknown:
        raise ValueError(f"unknown corruption(s) {unknown}; expected some of {', '.join(CORRUPTIONS)}")
    if sampling not in SAMPLINGS:
        raise ValueError(f"unknown sampling {sampling!r}; expected one of {', '.join(SAMPLINGS)}")
    corruptions = list(dict.fromkeys(corruptions))  # a type named twice makes its pairs once
    out = CorruptionSet(sampling=sampling)
    for d in dialogues:
        valid = [i for i, e in enumerate(d.explanations) if e.valid]
        if not valid:
            out.skipped[("*", "dialogue has no valid explanation")] += 1
            continue
        for i in valid:
            e = d.explanations[i]
            made: list[CorruptedPair] = []
            for c in corruptions:
                text, source, reason = corrupt(d, i, c, seed)
                if text is None:
                    out.skipped[(c, reason)] += 1
                    continue
                made.append(CorruptedPair(
                    dialogue_id=d.id, dataset=d.dataset, explanation_index=i, dimension=e.dimension,
                    corruption=c, category=CATEGORY[c], valid_text=e.text, corrupted_text=text,
                    source_index=source))
            if sampling == ALL_TYPES:
                out.pairs.extend(made)
            elif made:  # drawn in the canonical order: the draw depends on the set of types only
                pool = sorted(made, key=lambda pair: CORRUPTIONS.index(pair.corruption))
                draw = instance_rng(seed, d.id, i, DRAW).random()
                out.pairs.append(pool[int(draw * len(pool))])
            else:
                out.skipped[("*", "explanation allows no corruption type")] += 1
    return out
