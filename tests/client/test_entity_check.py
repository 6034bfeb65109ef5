"""The named-entity check: parsing the labelled file, token-level precision/recall by hand on a
fake backend, and the real backend's figures on the hand-labelled sample (skipped, with the
reason, when the `evals` extra is not installed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from dialscore.evals.entity_check import (EntityScores, by_case, errors, main, parse_labelled,
                                          read_labelled, score_entities)

SAMPLE = Path(__file__).parent / "data" / "entities_labelled.txt"


class CapitalisedAreEntities:
    """Flags every capitalised token: wrong in known ways, so the counts can be worked out."""

    name = "capitalised"

    def tag(self, tokens):
        return ["NNP" if t[:1].isupper() else "NN" for t in tokens]

    def entities(self, tokens):
        return [t[:1].isupper() for t in tokens]

    def synonyms(self, word, tag):
        return []


def test_parse_labelled_marks_bracketed_tokens():
    utt = parse_labelled("i met [john] [smith] in [paris] , [bob] 's town .")
    assert utt.text == "i met john smith in paris , bob 's town ."
    assert utt.tokens == ("i", "met", "john", "smith", "in", "paris", ",", "bob", "'s", "town", ".")
    assert [t for t, e in zip(utt.tokens, utt.entity) if e] == ["john", "smith", "paris", "bob"]
    # "bob's" is one token to the battery: a bracket inside it would label half a token.
    for bad in ("a [b", "a ] b", "[a [b]]", "[bob]'s town"):
        with pytest.raises(ValueError):
            parse_labelled(bad)


def test_precision_and_recall_by_hand():
    utterances = [parse_labelled("Yes, [Anna] met [bob] in [New] [York]."),
                  parse_labelled("The [Google] office")]
    s = score_entities(utterances, CapitalisedAreEntities())
    # Flagged: Yes, Anna, New, York, The, Google -> tp 4 (Anna New York Google), fp 2 (Yes The);
    # labelled but not flagged: bob -> fn 1.
    assert s == EntityScores(utterances=2, tokens=12, true_positives=4, false_positives=2,
                             false_negatives=1)
    assert s.precision == pytest.approx(4 / 6) and s.recall == pytest.approx(4 / 5)
    assert s.f1 == pytest.approx(2 * (4 / 6) * (4 / 5) / (4 / 6 + 4 / 5))
    assert {(tok, kind) for _, tok, kind in errors(utterances, CapitalisedAreEntities())} == {
        ("Yes", "spurious"), ("The", "spurious"), ("bob", "missed")}
    assert EntityScores(0, 0, 0, 0, 0).precision is None


def test_the_labelled_sample_mixes_cased_and_lower_cased_dialogue():
    utterances = read_labelled(SAMPLE)
    groups = by_case(utterances)
    assert len(utterances) >= 60 and len(groups["cased"]) >= 30 and len(groups["lower-cased"]) >= 30
    assert sum(sum(u.entity) for u in utterances) >= 80


def test_real_backend_precision_and_recall_on_the_sample(capsys):
    from dialscore.evals.linguistic import default_backend

    backend = default_backend()  # the evals extra ships its data: unavailable is a failure
    utterances = read_labelled(SAMPLE)
    s = score_entities(utterances, backend)
    assert s.true_positives + s.false_negatives == sum(sum(u.entity) for u in utterances)
    # Measured with textblob 0.20.1: precision 0.838, recall 0.830 (cased 0.855 / 0.959,
    # lower-cased 0.818 / 0.706: lower-case names that are common words, "bill", "mark", are
    # missed). The floors catch a regression of the tagger or of the lower-case lookup.
    assert s.precision > 0.75 and s.recall > 0.75
    cased, lower = (score_entities(g, backend) for g in by_case(utterances).values())
    assert cased.recall > lower.recall > 0.6
    assert main([str(SAMPLE)]) == 0
    out = capsys.readouterr().out
    assert f"precision {s.precision:.3f}, recall {s.recall:.3f}" in out
