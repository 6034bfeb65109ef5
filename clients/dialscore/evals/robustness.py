"""The ADEM-style robustness battery's perturbations: the variants of a response.

A scorer is given (context, response) and (context, variant) pairs; a good one keeps the score
of slight variants, and drops unnatural and generic ones. The variants (`KINDS`, in report order):

    slight       no_punctuation        punctuation tokens removed
                 no_stopwords_25       the 25 most common stopwords removed (`STOPWORDS_25`)
                 no_stopwords_nltk     all NLTK English stopwords removed (`NLTK_STOPWORDS`)
                 no_entities           named-entity tokens removed                 (backend)
                 synonyms              content words -> a WordNet synonym, same inflection (backend)
    simplified   nouns_pronouns_verbs  only nouns, pronouns and verbs kept         (backend)
    unnatural    nouns_only            only nouns kept                             (backend)
                 jumbled               words shuffled (never left in order when they can move)
                 reversed              word order reversed
                 repeated              a quarter of the words (at least one) doubled in place
    generic      generic_sorry         "I'm sorry, can you repeat?"
                 generic_will_do       "I will do"
                 generic_fantastic     "fantastic! how are you?"

Tokens. The deleting and replacing variants split the text into words and punctuation marks
(`tokenize`: a word may hold inner apostrophes, "don't"; a clitic such as "'m" or "n't" is a
word; every other non-space character is a mark) and put the kept tokens back with the spacing
they had, so "I met John in Paris." without entities is "I met in." and MuTual's "do n't"
stays "do n't".
Stopwords match case-insensitively; "n't" counts as "not" and a clitic without its apostrophe
("'m" as "m"), as in NLTK's list. Punctuation marks are dropped by the POS-filtering variants
(they are neither nouns, pronouns nor verbs). The word-order variants (jumbled, reversed,
repeated) work on whitespace-separated words (punctuation stays attached to its word) and join
them with single spaces. Modal verbs (MD) are not verbs for `nouns_pronouns_verbs`; pronouns are PRP,
PRP$, WP and WP$; nouns NN, NNS, NNP and NNPS.

A variant can be empty (a response made only of stopwords); scorers usually refuse empty text,
so runners skip those pairs and `robustness_stats.variant_stats` counts them as missing.

"Only nouns" is unnatural, not a simplification: the paper expects it to "ideally obtain low
scores" (spec section 5), so it is reported with the variants that should lose score.

Synonyms. Every content word (a tag in `CONTENT_TAGS`: nouns, verbs, adjectives, adverbs) that is
neither a stopword (`NLTK_STOPWORDS`) nor a named entity is eligible; each eligible word with a
synonym from the backend is replaced (one candidate picked at random), in its own inflection and
case. `synonym_replacements` returns the share replaced (replaced / eligible) with the text, which
the runner reports; words without a synonym in WordNet are what keeps the share below 1.

Determinism. `perturb(text, kind, rng)` consumes only the `random.Random` it is given;
`perturb_all` seeds one per (seed, kind, response index), so a variant does not depend on which
other kinds or responses were generated. The linguistic backend (`dialscore.evals.linguistic`) is
deterministic too.

The responses perturbed and their contexts are read by :mod:`dialscore.evals.robustness_items`;
the scores of originals and variants are compared by :mod:`dialscore.evals.robustness_stats`.
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from dialscore.evals.linguistic import CONTENT_TAGS, LinguisticBackend, default_backend

# The 25 most common stopwords, as listed by the ADEM re-evaluation (spec section 5).
STOPWORDS_25: frozenset[str] = frozenset(
    "a an and are as at be by for from has he in is it its of on that the to was were will "
    "with".split())

# NLTK's English stopword list (nltk_data corpora/stopwords/english, the 179-word list), kept
# literally: the NLTK data is not on PyPI, and a fixed list keeps the variant reproducible.
NLTK_STOPWORDS: frozenset[str] = frozenset("""
i me my myself we our ours ourselves you you're you've you'll you'd your yours yourself
yourselves he him his himself she she's her hers herself it it's its itself they them their
theirs themselves what which who whom this that that'll these those am is are was were be been
being have has had having do does did doing a an the and but if or because as until while of at
by for with about against between into through during before after above below to from up down
in out on off over under again further then once here there when where why how all any both each
few more most other some such no nor not only own same so than too very s t can will just don
don't should should've now d ll m o re ve y ain aren aren't couldn couldn't didn didn't doesn
doesn't hadn hadn't hasn hasn't haven haven't isn isn't ma mightn mightn't mustn mustn't needn
needn't shan shan't shouldn shouldn't wasn wasn't weren weren't won won't wouldn wouldn't
""".split())

GENERIC_REPLIES: dict[str, str] = {
    "generic_sorry": "I'm sorry, can you repeat?",
    "generic_will_do": "I will do",
    "generic_fantastic": "fantastic! how are you?",
}

CATEGORIES: dict[str, str] = {
    "no_punctuation": "slight", "no_stopwords_25": "slight", "no_stopwords_nltk": "slight",
    "no_entities": "slight", "synonyms": "slight",
    "nouns_pronouns_verbs": "simplified",
    # The paper: only nouns "should ideally obtain low scores"; unnatural, not a simplification.
    "nouns_only": "unnatural",
    "jumbled": "unnatural", "reversed": "unnatural", "repeated": "unnatural",
    **{kind: "generic" for kind in GENERIC_REPLIES},
}
KINDS: tuple[str, ...] = tuple(CATEGORIES)
BACKEND_KINDS: frozenset[str] = frozenset(
    {"no_entities", "synonyms", "nouns_pronouns_verbs", "nouns_only"})

NOUN_TAGS = frozenset({"NN", "NNS", "NNP", "NNPS"})
PRONOUN_TAGS = frozenset({"PRP", "PRP$", "WP", "WP$"})
VERB_TAGS = frozenset({"VB", "VBD", "VBG", "VBN", "VBP", "VBZ"})
REPEAT_SHARE = 0.25

_TOKEN = re.compile(r"\d+(?:[.,:]\d+)*|\w+(?:['’]\w+)*|['’]\w+|[^\w\s]")


# --- tokens ----------------------------------------------------------------------------------


def tokenize(text: str) -> list[tuple[str, str]]:
    """(whitespace before, token) pairs; joined, they give back the text less trailing space."""
    out, end = [], 0
    for m in _TOKEN.finditer(text):
        out.append((text[end:m.start()], m.group()))
        end = m.end()
    return out


def is_punctuation(token: str) -> bool:
    return not any(ch.isalnum() for ch in token)


def _join(tokens: Sequence[tuple[str, str]], keep: Sequence[bool],
          replace: dict[int, str] | None = None) -> str:
    """The kept tokens with their original spacing; a word that lost the token between it and
    the previous word gets a space, so "hello,world" without punctuation is "hello world"."""
    parts: list[str] = []
    dropped = False
    prev_word = False
    for i, ((sep, tok), k) in enumerate(zip(tokens, keep)):
        if not k:
            dropped = dropped or bool(parts)
            continue
        tok = (replace or {}).get(i, tok)
        word = not is_punctuation(tok)
        if not parts:
            sep = ""
        elif dropped and not sep and word and prev_word:
            sep = " "
        parts.append(sep + tok)
        dropped, prev_word = False, word
    return "".join(parts)


def _stop_key(token: str) -> str:
    key = token.lower().replace("’", "'")
    if key == "n't":
        return "not"
    return key[1:] if key.startswith("'") and len(key) > 1 else key


def _match_case(candidate: str, original: str) -> str:
    if len(original) > 1 and original.isupper():
        return candidate.upper()
    if original[:1].isupper():
        return candidate[:1].upper() + candidate[1:]
    return candidate


# --- perturbations ---------------------------------------------------------------------------


def _drop(text: str, drop: Callable[[str], bool]) -> str:
    tokens = tokenize(text)
    return _join(tokens, [not drop(tok) for _, tok in tokens])


def _keep_tags(text: str, backend: LinguisticBackend, allowed: frozenset[str]) -> str:
    tokens = tokenize(text)
    tags = backend.tag([tok for _, tok in tokens])
    return _join(tokens, [tag in allowed and not is_punctuation(tok)
                          for (_, tok), tag in zip(tokens, tags)])


@dataclass(frozen=True)
class SynonymVariant:
    """A synonym variant and how much of its text it replaced."""

    text: str
    replaced: int
    eligible: int

    @property
    def share(self) -> float | None:
        """replaced / eligible; None when the text has no eligible content word."""
        return self.replaced / self.eligible if self.eligible else None


def _synonyms(text: str, backend: LinguisticBackend, rng: random.Random) -> SynonymVariant:
    tokens = tokenize(text)
    words = [tok for _, tok in tokens]
    replace: dict[int, str] = {}
    eligible = 0
    for i, (tok, tag, entity) in enumerate(zip(words, backend.tag(words),
                                               backend.entities(words))):
        if (tag not in CONTENT_TAGS or entity or is_punctuation(tok)
                or _stop_key(tok) in NLTK_STOPWORDS):
            continue
        eligible += 1
        candidates = backend.synonyms(tok.lower(), tag)
        if candidates:
            replace[i] = _match_case(rng.choice(candidates), tok)
    return SynonymVariant(_join(tokens, [True] * len(tokens), replace), len(replace), eligible)


def synonym_replacements(texts: Sequence[str], seed: int = 0,
                         backend: LinguisticBackend | None = None) -> list[SynonymVariant]:
    """The synonym variant of each text with its counts; `.text` equals what `perturb_all`
    gives for the same seed (same per-item RNG)."""
    backend = backend if backend is not None else default_backend()
    return [_synonyms(t, backend, variant_rng(seed, "synonyms", i)) for i, t in enumerate(texts)]


def mean_share(variants: Sequence[SynonymVariant]) -> dict[str, float | int | None]:
    """The share of eligible content words replaced: the mean of the per-item shares (items with
    no eligible word left out), and the pooled share over all items."""
    shares = [v.share for v in variants if v.share is not None]
    replaced, eligible = sum(v.replaced for v in variants), sum(v.eligible for v in variants)
    return {"mean_item_share": math.fsum(shares) / len(shares) if shares else None,
            "pooled_share": replaced / eligible if eligible else None,
            "replaced": replaced, "eligible": eligible, "items_with_eligible": len(shares)}


def _jumbled(words: list[str], rng: random.Random) -> list[str]:
    if len(set(words)) < 2:
        return list(words)
    shuffled = list(words)
    for _ in range(100):
        rng.shuffle(shuffled)
        if shuffled != words:
            return shuffled
    return words[1:] + words[:1]  # a rotation differs from the original when two words differ


def _repeated(words: list[str], rng: random.Random) -> list[str]:
    candidates = [i for i, w in enumerate(words) if not is_punctuation(w)]
    if not candidates:
        return list(words)
    k = max(1, round(len(candidates) * REPEAT_SHARE))
    chosen = set(rng.sample(candidates, k))
    out: list[str] = []
    for i, w in enumerate(words):
        out.extend((w, w) if i in chosen else (w,))
    return out


def perturb(text: str, kind: str, rng: random.Random,
            backend: LinguisticBackend | None = None) -> str:
    """The `kind` variant of `text` (see the module docstring). `rng` drives the random kinds
    (synonyms, jumbled, repeated); `backend` (default: `default_backend()`) serves the kinds in
    `BACKEND_KINDS`. May return "" when everything is removed."""
    if kind in GENERIC_REPLIES:
        return GENERIC_REPLIES[kind]
    if kind not in CATEGORIES:
        raise ValueError(f"unknown perturbation {kind!r}; choose from {', '.join(KINDS)}")
    if kind == "no_punctuation":
        return _drop(text, is_punctuation)
    if kind == "no_stopwords_25":
        return _drop(text, lambda tok: _stop_key(tok) in STOPWORDS_25)
    if kind == "no_stopwords_nltk":
        return _drop(text, lambda tok: _stop_key(tok) in NLTK_STOPWORDS)
    if kind in ("jumbled", "reversed", "repeated"):
        words = text.split()
        if kind == "reversed":
            return " ".join(reversed(words))
        return " ".join(_jumbled(words, rng) if kind == "jumbled" else _repeated(words, rng))
    backend = backend if backend is not None else default_backend()
    if kind == "no_entities":
        tokens = tokenize(text)
        flags = backend.entities([tok for _, tok in tokens])
        return _join(tokens, [not f for f in flags])
    if kind == "synonyms":
        return _synonyms(text, backend, rng).text
    if kind == "nouns_pronouns_verbs":
        return _keep_tags(text, backend, NOUN_TAGS | PRONOUN_TAGS | VERB_TAGS)
    return _keep_tags(text, backend, NOUN_TAGS)  # nouns_only


def variant_rng(seed: int, kind: str, index: int) -> random.Random:
    """The RNG for one (kind, response): fixed by (seed, kind, index) alone."""
    return random.Random(f"{seed}:{kind}:{index}")


def perturb_all(texts: Sequence[str], kinds: Sequence[str] = KINDS, seed: int = 0,
                backend: LinguisticBackend | None = None,
                generic_style: Callable[[str], str] | None = None) -> dict[str, list[str]]:
    """Every requested variant of every text: {kind: [variant of texts[0], ...]}.

    `generic_style` rewrites the generic replies to the corpus's style (e.g. `mutual_style`
    for lower-cased, tokenised MuTual text). The backend is loaded only when a kind needs it.
    """
    unknown = [k for k in kinds if k not in CATEGORIES]
    if unknown:
        raise ValueError(f"unknown perturbations {unknown}; choose from {', '.join(KINDS)}")
    if backend is None and any(k in BACKEND_KINDS for k in kinds):
        backend = default_backend()
    out: dict[str, list[str]] = {}
    for kind in kinds:
        variants = [perturb(t, kind, variant_rng(seed, kind, i), backend)
                    for i, t in enumerate(texts)]
        if kind in GENERIC_REPLIES and generic_style is not None:
            variants = [generic_style(v) for v in variants]
        out[kind] = variants
    return out


def mutual_style(text: str) -> str:
    """Lower-case and tokenise like MuTual: "I'm sorry, can you repeat?" ->
    "i 'm sorry , can you repeat ?"."""
    t = text.lower().replace("’", "'")
    t = re.sub(r"(\w)n't\b", r"\1 n't", t)
    t = re.sub(r"(\w)'(m|s|re|ve|ll|d)\b", r"\1 '\2", t)
    t = re.sub(r"([^\w\s'])", r" \1 ", t)
    return " ".join(t.split())
