"""The DECODE detector engine: pairing logic (fake classifier), the NLI classifier on the stand-ins
(label index, probabilities, truncation, batching) and the DECODE file (read with the client's
reader)."""

from __future__ import annotations

import pytest

from dialscore.evals.decode import DecodeDialogue, Prediction, read_decode
from dialscore.evals.decode_metrics import decode_metrics
from dialscore_server.contradiction.engine.classifier import (
    NLIPairClassifier, NoContradictionLabelError, find_contradiction_index,
)
from dialscore_server.contradiction.engine.engine import ContradictionDetector
from dialscore_server.contradiction.engine.pairing import (
    DetectionJob, DetectionResult, Evidence, Turn, plan_pairs, unstructured_premise,
)
from dialscore_server.contract.errors import InputError
from shared_data import shared_file


class FakeClassifier:
    """Probability from a table keyed by (premise, hypothesis); records every call."""

    def __init__(self, table: dict[tuple[str, str], float] | None = None, default: float = 0.1):
        self.table = table or {}
        self.default = default
        self.calls: list[list[tuple[str, str]]] = []

    def contradiction_probs(self, pairs):
        self.calls.append(list(pairs))
        return [self.table.get(p, self.default) for p in pairs]


def dialogue(*spec, ids=None) -> list[Turn]:
    """dialogue(("bot", "hi"), ("user", "yo"), ...) with optional ids."""
    return [Turn(s, t, None if ids is None else ids[i]) for i, (s, t) in enumerate(spec)]


# ------------------------------------------------------------------------------------ pairing
def test_only_the_last_speakers_earlier_turns_are_paired():
    fake = FakeClassifier()
    turns = dialogue(("bot", "b0"), ("user", "u1"), ("bot", "b2"), ("user", "u3"), ("bot", "b4"))
    [res] = ContradictionDetector(classifier=fake).detect([turns])
    assert fake.calls == [[("b0", "b4"), ("b2", "b4")]]
    assert res.num_pairs == 2 and res.probability == pytest.approx(0.1)


def test_non_alternating_dialogue_with_string_speakers_pairs_by_speaker_not_parity():
    fake = FakeClassifier({("a1", "a5"): 0.9})
    turns = dialogue(("alice", "a0"), ("alice", "a1"), ("bob", "b2"), ("alice", "a3"),
                     ("carol", "c4"), ("alice", "a5"))
    [res] = ContradictionDetector(classifier=fake).detect([turns])
    assert fake.calls == [[("a0", "a5"), ("a1", "a5"), ("a3", "a5")]]
    assert res == DetectionResult(True, 0.9, (Evidence(1, 0.9),), 3)


def test_integer_and_string_speakers_are_distinct():
    fake = FakeClassifier()
    turns = dialogue((1, "x"), ("1", "y"), (0, "z"), (1, "last"))
    ContradictionDetector(classifier=fake).detect([turns])
    assert fake.calls == [[("x", "last")]]


def test_evidence_holds_turn_ids_in_dialogue_order():
    fake = FakeClassifier({("p1", "h"): 0.7, ("p2", "h"): 0.2, ("p3", "h"): 0.95})
    turns = dialogue(("s", "p1"), ("t", "q"), ("s", "p2"), ("s", "p3"), ("s", "h"),
                     ids=["t-10", 11, "x", 42, "last"])
    [res] = ContradictionDetector(classifier=fake).detect([turns])
    assert res.is_contradiction and res.probability == 0.95
    assert res.evidence == (Evidence("t-10", 0.7), Evidence(42, 0.95))


def test_thresholds_are_strict_and_evidence_threshold_defaults_to_threshold():
    fake = FakeClassifier({("p1", "h"): 0.5, ("p2", "h"): 0.3})
    turns = dialogue(("s", "p1"), ("s", "p2"), ("s", "h"))
    det = ContradictionDetector(classifier=fake)
    # probability == threshold is not a contradiction (strictly greater), and no evidence.
    [res] = det.detect([turns])
    assert res == DetectionResult(False, 0.5, (), 2)
    [res] = det.detect([turns], threshold=0.4)
    assert res.is_contradiction and res.evidence == (Evidence(0, 0.5),)
    # A lower evidence threshold gives evidence without the label.
    [res] = det.detect([turns], threshold=0.6, evidence_threshold=0.25)
    assert not res.is_contradiction
    assert res.evidence == (Evidence(0, 0.5), Evidence(1, 0.3))
    # A higher one gives the label without evidence.
    [res] = det.detect([turns], threshold=0.2, evidence_threshold=0.9)
    assert res.is_contradiction and res.evidence == ()


@pytest.mark.parametrize("mode", ["structured", "unstructured"])
def test_one_utterance_dialogue_is_valid_and_not_a_contradiction(mode):
    fake = FakeClassifier(default=1.0)
    [res] = ContradictionDetector(classifier=fake).detect([dialogue(("bot", "hello"))], mode=mode)
    assert res == DetectionResult(False, 0.0, (), 0)
    assert fake.calls == []


def test_last_speaker_without_earlier_turn_is_not_a_contradiction():
    fake = FakeClassifier(default=1.0)
    [res] = ContradictionDetector(classifier=fake).detect(
        [dialogue(("user", "a"), ("user", "b"), ("bot", "first words"))], threshold=0.0)
    assert res == DetectionResult(False, 0.0, (), 0)


def test_unstructured_premise_marks_speakers_and_has_no_evidence():
    turns = dialogue(("A", "hi there"), (2, "hello"), ("A", "bye"))
    assert unstructured_premise(turns[:-1]) == "A: hi there\n2: hello"
    fake = FakeClassifier({("A: hi there\n2: hello", "bye"): 0.8})
    [res] = ContradictionDetector(classifier=fake).detect([turns], mode="unstructured")
    assert fake.calls == [[("A: hi there\n2: hello", "bye")]]
    assert res == DetectionResult(True, 0.8, (), 1)


def test_dialogues_and_jobs_share_one_classifier_call_and_regroup_in_order():
    fake = FakeClassifier({("x0", "x2"): 0.9, ("y0", "y1"): 0.6})
    d1 = dialogue(("a", "x0"), ("b", "x1"), ("a", "x2"))
    d2 = dialogue(("a", "only"))
    d3 = dialogue(("b", "y0"), ("b", "y1"))
    det = ContradictionDetector(classifier=fake)
    out = det.detect_many([DetectionJob([d1, d2]), DetectionJob([d3], threshold=0.7),
                           DetectionJob([d1], mode="unstructured")])
    assert len(fake.calls) == 1
    assert fake.calls[0] == [("x0", "x2"), ("y0", "y1"), ("a: x0\nb: x1", "x2")]
    assert [[r.probability for r in job] for job in out] == [[0.9, 0.0], [0.6], [0.1]]
    assert [[r.is_contradiction for r in job] for job in out] == [[True, False], [False], [False]]
    # Same as one dialogue at a time.
    assert out[0] == det.detect([d1]) + det.detect([d2])


def test_bad_input_names_the_field():
    det = ContradictionDetector(classifier=FakeClassifier())
    good = dialogue(("a", "x"))
    with pytest.raises(InputError) as e:
        det.detect([good, []])
    assert e.value.param == "dialogues[1].turns"
    with pytest.raises(InputError) as e:
        det.detect([dialogue(("a", "x"), ("b", "y"), ("a", "z"), ids=[1, 2, 1])])
    assert e.value.param == "dialogues[0].turns[2].id" and "unique" in str(e.value)
    with pytest.raises(InputError) as e:  # turn 1 has no id, so its id is 1: a clash
        det.detect([[Turn("a", "x", 1), Turn("b", "y")]])
    assert e.value.param == "dialogues[0].turns[1].id"
    with pytest.raises(InputError) as e:
        det.detect([good], threshold=1.5)
    assert e.value.param == "threshold"
    with pytest.raises(InputError) as e:
        det.detect([good], evidence_threshold=-0.1)
    assert e.value.param == "evidence_threshold"
    with pytest.raises(InputError) as e:
        det.detect([good], mode="sideways")  # type: ignore[arg-type]
    assert e.value.param == "mode"


def test_constructor_needs_exactly_one_source_of_probabilities(stand_in_registry):
    with pytest.raises(ValueError):
        ContradictionDetector()
    with pytest.raises(ValueError):
        ContradictionDetector(stand_in_registry.get("roberta-large-mnli"), classifier=FakeClassifier())
    with pytest.raises(ValueError, match="classifier"):
        NLIPairClassifier(stand_in_registry.get("dialogpt-medium"))


def test_a_plain_function_can_be_the_classifier():
    det = ContradictionDetector(classifier=lambda pairs: [0.75 for _ in pairs])
    [res] = det.detect([dialogue(("a", "x"), ("a", "y"))])
    assert res == DetectionResult(True, 0.75, (Evidence(0, 0.75),), 1) and not det.stand_in
    with pytest.raises(TypeError):
        ContradictionDetector(classifier=42)  # type: ignore[arg-type]


def test_plan_pairs_is_what_detect_classifies():
    turns = dialogue(("a", "1"), ("b", "2"), ("a", "3"))
    assert [(p.turn, p.premise, p.hypothesis) for p in plan_pairs(turns)] == [(0, "1", "3")]


# ------------------------------------------------------------------------------------ label index
def test_find_contradiction_index_reads_id2label():
    assert find_contradiction_index({0: "CONTRADICTION", 1: "NEUTRAL", 2: "ENTAILMENT"}) == 0
    assert find_contradiction_index({"0": "entailment", "1": "neutral", "2": "contradiction"}) == 2
    assert find_contradiction_index({0: "not_entailment", 1: " Contradiction "}) == 1
    for bad in ({0: "LABEL_0", 1: "LABEL_1", 2: "LABEL_2"}, {0: "contradiction"},
                {0: "contradiction", 1: "CONTRADICTION"}, None):
        with pytest.raises(NoContradictionLabelError):
            find_contradiction_index(bad)


@pytest.fixture(scope="module")
def nli(stand_in_registry):
    """Both stand-in classifiers with weights re-initialised so probabilities vary."""
    from dialscore_server.checkpoints.loading import load_model
    from dialscore_server.checkpoints.standins import reinit_

    out = {}
    for name in ("roberta-large-mnli", "roberta-large-anli"):
        loaded = load_model(stand_in_registry.get(name))
        reinit_(loaded.model, 0.3)
        out[name] = NLIPairClassifier(loaded.config, loaded, token_budget=512, num_threads=1)
    return out


PAIRS = [
    ("I have a dog.", "I do not have any pets."),
    ("my sister won the game at the park.", "my sister failed the exam."),
    ("", "I live in a small town."),
    ("Ünïcödé café 😀", "pizza, definitely."),
    ("how are you today?", "we moved to a new city."),
]


@pytest.mark.parametrize("name,index", [("roberta-large-mnli", 0), ("roberta-large-anli", 2)])
def test_label_index_and_probabilities_match_a_direct_model_call(nli, name, index):
    import torch

    clf = nli[name]
    assert clf.contradiction_index == index
    assert clf.labels[index].lower() == "contradiction"
    got = clf.contradiction_probs(PAIRS)
    tok, model = clf.tokenizer, clf.model
    for (p, h), prob in zip(PAIRS, got):
        enc = tok(p, h, return_tensors="pt")
        with torch.inference_mode():
            expected = torch.softmax(model(**enc).logits.float(), dim=-1)[0, index].item()
        assert prob == pytest.approx(expected, abs=1e-5)
    assert 0.0 < min(got) < max(got) < 1.0 and max(got) - min(got) > 1e-3
    # An empty text is still a pair (`<s> A </s></s> </s>` for RoBERTa), not a single sentence.
    assert 0.0 < clf.contradiction_probs([("how are you today?", "")])[0] < 1.0


def test_checkpoint_without_a_contradiction_label_is_refused_at_start_up(stand_in_registry):
    from transformers import AutoTokenizer, RobertaConfig, RobertaForSequenceClassification

    from dialscore_server.checkpoints.loading import LoadedModel

    config = stand_in_registry.get("roberta-large-mnli")
    tok = AutoTokenizer.from_pretrained(config.source)
    model = RobertaForSequenceClassification(RobertaConfig(
        vocab_size=len(tok), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=32, num_labels=3, pad_token_id=tok.pad_token_id)).eval()
    assert model.config.id2label == {0: "LABEL_0", 1: "LABEL_1", 2: "LABEL_2"}
    loaded = LoadedModel(config, model, tok, "cpu", True, None)
    with pytest.raises(NoContradictionLabelError) as e:
        ContradictionDetector(config, loaded)
    msg = str(e.value)
    assert "roberta-large-mnli" in msg and "LABEL_0" in msg and "'contradiction'" in msg


def test_truncation_keeps_the_hypothesis_and_the_newest_premise_tokens(nli):
    clf = nli["roberta-large-mnli"]
    room = clf.room
    assert room == clf.config.max_length - clf.num_special == 256 - 4
    p, h = list(range(1000, 1400)), list(range(10, 20))
    ids = clf.encode_ids(p, h)
    assert ids.truncated and ids.cost == clf.config.max_length
    assert list(ids.input_ids[1:1 + room - 10]) == p[-(room - 10):]  # oldest premise tokens cut
    assert list(ids.input_ids[-11:-1]) == h
    # A hypothesis longer than half the window is cut from the right, to half the room.
    ids = clf.encode_ids(p, list(range(2000, 2400)))
    assert ids.cost == clf.config.max_length
    assert list(ids.input_ids[-1 - room // 2:-1]) == list(range(2000, 2000 + room // 2))
    # Short premise: the hypothesis takes the rest of the window.
    _, hyp, cut = clf.fit([1, 2, 3], list(range(500)))
    assert cut and len(hyp) == room - 3
    # Long texts run (positions stay inside the model's table).
    long = " ".join(["my friend missed the bus at school."] * 80)
    assert len(clf.contradiction_probs([(long, long), ("a", long)])) == 2


def test_batched_detect_equals_one_dialogue_at_a_time(nli):
    # A small token budget, so that one call spans several forward passes.
    base = nli["roberta-large-anli"]
    clf = NLIPairClassifier(base.config, base.loaded, token_budget=160, num_threads=1)
    det = ContradictionDetector(classifier=clf)
    lines = ["I have a dog.", "do you like to cook?", "yes, I love to cook pasta.",
             "I do not have any pets.", "I live in a small town.", "we moved to a new city.",
             "pizza, definitely.", "my sister failed the exam at school."]
    dialogues = [
        dialogue(("bot", lines[0]), ("user", lines[1]), ("bot", lines[2]), ("user", lines[4]),
                 ("bot", lines[3])),
        dialogue((0, lines[5]), (0, lines[6]), (1, lines[7]), (0, lines[4] + " " + lines[0])),
        dialogue(("x", lines[1])),
        dialogue(("a", " ".join(lines)), ("b", lines[2]), ("a", lines[5]), ("a", lines[7]),
                 ids=["first", "second", 7, "end"]),
    ]
    for mode in ("structured", "unstructured"):
        batched = det.detect(dialogues, mode=mode, evidence_threshold=0.0)
        alone = [det.detect([d], mode=mode, evidence_threshold=0.0)[0] for d in dialogues]
        for b, a in zip(batched, alone):
            assert b.probability == pytest.approx(a.probability, abs=1e-5)
            assert [e.turn for e in b.evidence] == [e.turn for e in a.evidence]
            assert b.num_pairs == a.num_pairs
    # The batch really was split by the token budget, and identical pairs computed once.
    pairs = [(p.premise, p.hypothesis) for d in dialogues for p in plan_pairs(d)]
    scores = clf.classify(pairs + pairs[:2])
    assert scores.stats.batches > 1 and scores.stats.unique_pairs == len(pairs)
    assert max(scores.stats.batch_sizes) >= 2 and scores.probs[:2] == scores.probs[-2:]


# ------------------------------------------------------------------------------------ DECODE
def detector_turns(d: DecodeDialogue) -> list[Turn]:
    """A dialogue from the client's DECODE reader as detector input (speaker, text, id)."""
    return [Turn(t.speaker, t.text, t.id) for t in d.turns]


def test_decode_file_parses_and_runs_through_the_detector(nli):
    path = shared_file("data/decode/rct.jsonl")
    examples = read_decode(path)
    assert len(examples) == 2011
    dialogues = [detector_turns(ex) for ex in examples]
    for ex, turns in zip(examples, dialogues):  # every dialogue is valid detector input
        plan_pairs(turns)
        assert turns[-1].id not in ex.evidence
        assert ex.evidence <= {t.id for t in turns[:-1]}
    sample, sample_turns = examples[:48], dialogues[:48]
    det = ContradictionDetector(classifier=nli["roberta-large-mnli"])
    results = det.detect(sample_turns, evidence_threshold=0.3)
    assert len(results) == len(sample)
    for turns, res in zip(sample_turns, results):
        last = turns[-1]
        same = {t.id for t in turns[:-1] if t.speaker == last.speaker}
        assert res.num_pairs == len(same)
        assert {e.turn for e in res.evidence} <= same
        assert 0.0 <= res.probability <= 1.0
    predictions = [Prediction(res.is_contradiction, res.probability,
                              frozenset(e.turn for e in res.evidence)) for res in results]
    m = decode_metrics(sample, predictions)
    assert m.n == 48 and 0.0 <= m.accuracy <= 1.0 and 0.0 <= m.evidence_f1 <= 1.0
