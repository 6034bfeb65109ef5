"""MuTual and DECODE readers: the official folder layout, JSON Lines, and the real files in
../shared/data (skipped with the reason when ../shared is absent)."""

from __future__ import annotations

import json

import pytest

from dialscore.evals.decode import Prediction, dialogue_from_record, read_decode
from dialscore.evals.decode_metrics import decode_metrics
from dialscore.evals.decode_transforms import a2t_set, rct_set
from dialscore.evals.mutual import (evaluate_mutual, parse_article, read_mutual, split_speaker,
                                  write_ranked)
from shared_data import shared_file


def _instance(ident, answer="B"):
    return {"answers": answer, "id": ident, "article": "f : hi . m : hello , how are you ?",
            "options": ["f : fine .", "f : i 'm fine , thanks .", "f : bye .", "f : what ?"]}


def test_official_layout_is_read_in_natural_id_order(tmp_path):
    split = tmp_path / "dev"
    split.mkdir()
    for n in (10, 2, 1):
        (split / f"dev_{n}.txt").write_text(json.dumps(_instance(f"dev_{n}")))
    (split / ".hidden.txt").write_text("not json")
    got = read_mutual(split)
    assert [i.id for i in got] == ["dev_1", "dev_2", "dev_10"]
    assert got[0].answer == 1 and got[0].answer_letter == "B"


def test_jsonl_and_a_blank_answer(tmp_path):
    path = tmp_path / "test.jsonl"
    path.write_text(json.dumps(_instance("test_1", "")) + "\n\n" + json.dumps(_instance("test_2")))
    got = read_mutual(path)
    assert [i.id for i in got] == ["test_1", "test_2"]
    assert got[0].answer is None and got[0].answer_letter is None


def test_reader_rejects_bad_answers_and_duplicates(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(_instance("x", "E")) + "\n")
    with pytest.raises(ValueError, match="bad.jsonl:1.*answers"):
        read_mutual(bad)
    dup = tmp_path / "dup.jsonl"
    dup.write_text((json.dumps(_instance("x")) + "\n") * 2)
    with pytest.raises(ValueError, match="duplicate id"):
        read_mutual(dup)


def test_article_split_into_turns():
    turns = parse_article("m : hi , della . f : only 4 days . m : i 'm f : 1 ok")
    assert [(t.id, t.speaker, t.text) for t in turns] == [
        (0, "m", "hi , della ."), (1, "f", "only 4 days ."), (2, "m", "i 'm"), (3, "f", "1 ok")]
    # A marker must stand as its own tokens: "if :" or "m:" do not split.
    assert len(parse_article("m : see if : then m: no")) == 1
    assert split_speaker("f : yes .") == ("f", "yes .")
    assert split_speaker("could you repeat that ?") == (None, "could you repeat that ?")


def test_mutual_dev_real_file(tmp_path):
    instances = read_mutual(shared_file("data/mutual/dev.jsonl"))
    assert len(instances) == 886
    assert all(len(i.options) == 4 and i.answer is not None for i in instances)
    first = instances[0]
    assert first.id == "dev_1" and first.answer_letter == "B"
    assert [t.speaker for t in first.context] == ["m", "f", "m", "f", "m", "f"]
    assert all(t.speaker in ("m", "f") and t.text for i in instances for t in i.context)
    # End to end with a dummy scorer (option length), through the export.
    rankings, metrics = evaluate_mutual(
        instances, [[float(len(o)) for o in i.options] for i in instances])
    assert metrics.n_scored == 886 and 0 <= metrics.r_at_1 <= metrics.r_at_2 <= 1
    out = write_ranked(tmp_path / "dev_ranked.txt", [i.id for i in instances], rankings)
    lines = out.read_text().splitlines()
    assert len(lines) == 886 and lines[0].split("\t")[0] == "dev_1"
    assert all(sorted(line.split("\t")[1:]) == ["A", "B", "C", "D"] for line in lines)


def test_decode_record_drops_the_last_turn_from_the_evidence():
    record = {"record_id": "r1", "conversation_id": "abc#truncated#4", "is_contradiction": True,
              "aggregated_contradiction_indices": [1, 3],
              "auxiliary": {"source": "human_bot"},
              "turns": [{"turn_id": i, "agent_id": i % 2, "text": f"u{i}"} for i in range(4)]}
    d = dialogue_from_record(record)
    assert d.evidence == {1} and d.last.id == 3 and d.group == "human_bot"
    assert d.id == "r1" and d.conversation == "abc"
    assert [t.speaker for t in d.turns] == ["0", "1", "0", "1"]
    with pytest.raises(ValueError, match="not among the turns"):
        dialogue_from_record({**record, "aggregated_contradiction_indices": [7, 3]})
    with pytest.raises(ValueError, match="non-contradiction cannot have evidence"):
        dialogue_from_record({**record, "is_contradiction": False})


def test_decode_rct_real_file():
    dialogues = read_decode(shared_file("data/decode/rct.jsonl"))
    assert len(dialogues) == 2011
    assert len({d.id for d in dialogues}) == 2011
    # The RCT file is already transformed: every dialogue is a non-contradiction.
    assert not any(d.is_contradiction or d.evidence for d in dialogues)
    assert {d.group for d in dialogues} == {"BST_test", "WIZ_test", "EMPATHY_test",
                                           "CONVAI2_valid"}
    body = dialogues[0].to_request()
    assert set(body["turns"][0]) == {"id", "speaker", "text"}
    # Nothing qualifies for the diagnostic transforms; everything is skipped and counted.
    assert len(a2t_set(dialogues).skipped) == 2011 and len(rct_set(dialogues).skipped) == 2011
    # Metrics run over the whole file (a detector that never fires is 100% accurate here).
    m = decode_metrics(dialogues, [Prediction(False, 0.0)] * len(dialogues))
    assert m.accuracy == 1.0 and m.strict_accuracy == 1.0 and m.fire_rate == 0.0
    assert set(m.fire_rate_by_group) == {"BST_test", "WIZ_test", "EMPATHY_test", "CONVAI2_valid"}
