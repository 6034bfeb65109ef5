"""DECODE's human-bot analyses (spec section 3) on a hand-made annotated log of four bots, scored
by the contract fake (tests/client/contract_fake.py: the documented structured detection over
the negation classifier: 0.9 when the utterance negates and shares a word with an earlier
utterance of its speaker, 0.1 otherwise, 0.0 with no earlier utterance of its speaker).

Every expected figure below was computed by hand from LOG. The turns that decide the groups:

    utterance  speaker  contradiction  counts (orig, new)   agreement  score  group
    a@3        bot      true           (1, 2)               3          0.9    bot@3
    a@5        bot      true           (1, 0)               1          0.1    bot@1
    b@2        bot      null (0, 0) in b, (1, 0) in the later copy b#truncated#2: merged
                                                            1          0.9    bot@1, not a positive
    c@3        bot      true           (2, 1)               3          0.9    bot@3
    d@2        bot      true (1, 0) in the copy d#truncated#2, null (0, 0) in the later d: merged
                                                            1          0.1    bot@1, a positive
    every other bot turn: null, counts 0 or null            0                 no @n group

so bot@1 = {a@5, b@2, d@2}, bot@2 = {} (empty: "at least 2" would hold a@3 and c@3),
bot@3 = {a@3, c@3}; bot = 12 utterances, 4 positives; human = 9 utterances.
"""

from __future__ import annotations

import asyncio
import json
import math

import pytest

from dialscore.cli import main
from dialscore.client import AsyncDialscoreClient
from dialscore.evals.human_bot_log import expand_human_bot, read_human_bot
from dialscore.evals.runners.decode_human_bot import arun_decode_human_bot
from contract_fake import ContractFake
from shared_data import shared_file

AGENTS = {"0": {"is_human": True}, "1": {"is_human": False}}
ORIG, NEW = "original_verifier_contradiction_count", "new_verifier_contradiction_count"


def _record(cid, bot, turns):
    """turns: (agent, text, turn auxiliary)."""
    return {"conversation_id": cid, "agents": AGENTS, "auxiliary": {"original_model": bot},
            "turns": [{"turn_id": i, "agent_id": a, "text": t, "auxiliary": aux}
                      for i, (a, t, aux) in enumerate(turns)],
            "is_contradiction": False, "aggregated_contradiction_indices": []}


def bot(contradiction=None, orig=0, new=0):
    """A bot turn's auxiliary: the label and the two verifier counts."""
    return {"contradiction": contradiction, ORIG: orig, NEW: new}


H = {"contradiction": None}  # a human turn: no counts needed
LOG = [
    _record("a", "botA", [
        (0, "hi there .", H),
        (1, "i have a cat .", bot()),                                  # 0.0
        (0, "nice .", H),                                              # human 0.1
        (1, "i do not have a cat .", bot(True, 1, 2)),                 # 0.9 TP @3
        (0, "no way .", H),                                            # human 0.9 (fires)
        (1, "i like dogs .", bot(True, 1, 0))]),                       # 0.1 FN @1
    _record("b", "botA", [
        (1, "hello .", bot()),
        (0, "hey .", H),                                               # human 0.0
        (1, "i never say hello .", bot(None, 0, 0))]),                 # merged: 0.9 FP, @1
    _record("b#truncated#2", "botA", [
        (1, "hello .", bot()),
        (0, "hey .", H),
        (1, "i never say hello .", bot(None, 1, 0))]),                 # the copy that counts b@2
    _record("c", "botB", [
        (0, "hello .", H),
        (1, "i am tall .", bot()),                                     # 0.0
        (0, "cool .", H),                                              # human 0.1
        (1, "i am not tall .", bot(True, 2, 1)),                       # 0.9 TP @3
        (0, "ok .", H),                                                # human 0.1
        (1, "i am short .", bot(None, None, None))]),                  # 0.1 (null counts: 0)
    _record("d#truncated#2", "botC", [
        (1, "yo .", bot()),
        (0, "hi .", H),
        (1, "fine .", bot(True, 1, 0))]),                              # the copy that marks d@2
    _record("d", "botC", [
        (1, "yo .", bot()),
        (0, "hi .", H),                                                # human 0.0
        (1, "fine .", bot()),                                          # merged: 0.1 FN @1
        (0, "sure .", H),                                              # human 0.1
        (1, "bye .", bot())]),                                         # 0.1
    _record("e", "botD", [
        (0, "hi .", H),
        (1, "i run .", bot()),                                         # 0.0
        (0, "ok .", H),                                                # human 0.1
        (1, "i run far .", bot()),                                     # 0.1
        (0, "no .", H),                                                # human 0.9 (fires)
        (1, "i swim .", bot())]),                                      # 0.1
]


def _write(tmp_path, records=LOG, name="human_bot.jsonl"):
    path = tmp_path / name
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def _run(path, out, api, **kw):
    async def go():
        async with AsyncDialscoreClient("http://fake", transport=api.transport()) as client:
            return await arun_decode_human_bot(client, path, out, min_utterances=3,
                                               progress=False, **kw)
    return asyncio.run(go())


def test_reading_sums_the_counts_and_merges_truncated_copies(tmp_path):
    log = read_human_bot(_write(tmp_path))
    assert (log.records, log.conversations, log.copies) == (7, 5, 2)
    assert log.first_turns_skipped == 5
    # b and d: turns 0, 1 and 2 in both copies, of which turn 2's marks differ
    assert (log.turns_in_several_copies, log.turns_with_differing_marks) == (6, 2)
    by_id = {u.id: u for u in log.utterances}
    assert len(by_id) == 21 and sum(not u.is_human for u in log.utterances) == 12
    agreement = {uid: u.annotators for uid, u in by_id.items() if u.annotators}
    assert agreement == {"a@3": 3, "a@5": 1, "b@2": 1, "c@3": 3, "d@2": 1}
    assert {uid for uid, u in by_id.items() if u.marked} == {"a@3", "a@5", "c@3", "d@2"}
    # d@4 sees the union of d's copies as its context, turn ids in order
    assert [t.text for t in by_id["d@4"].dialogue.turns] == ["yo .", "hi .", "fine .", "sure .", "bye ."]
    assert by_id["d@2"].dialogue.is_contradiction and by_id["d@2"].bot == "botC"


def test_hand_computed_figures_groups_resume_and_files(tmp_path):
    path, out, api = _write(tmp_path), tmp_path / "out", ContractFake()
    run = _run(path, out, api, chunk_size=4)
    m = run.metrics
    assert run.scored_now == 21
    assert (m.n_bot, m.n_bot_marked, m.n_human) == (12, 4, 9)
    # Groups by exact agreement; bot@2 is empty.
    assert m.n_by_group == {"human": 9, "bot": 12, "bot@1": 3, "bot@2": 0, "bot@3": 2}
    assert m.positives_by_group == {"human": 0, "bot": 4, "bot@1": 2, "bot@2": 0, "bot@3": 2}
    assert m.fire_rate == {"human": 2 / 9, "bot": 3 / 12, "bot@1": 1 / 3, "bot@2": None,
                           "bot@3": 2 / 2}
    assert m.empty_groups() == ("bot@2",)
    assert (m.n_bot_agreed_not_marked, m.n_bot_marked_no_agreement) == (1, 0)
    # bot utterances: TP a@3, c@3; FP b@2; FN a@5, d@2
    assert m.precision == pytest.approx(2 / 3) and m.recall == pytest.approx(0.5)
    assert m.f1 == pytest.approx(4 / 7)
    # positives 0.9, 0.9, 0.1, 0.1 against negatives 0.0 x3, 0.1 x4, 0.9:
    # (2 * 7.5 + 2 * 5) / 32
    assert m.roc_auc == pytest.approx(25 / 32)
    bots = {b.bot: b for b in m.per_bot}
    assert bots["botA"].n == 4 and bots["botA"].mean_score == pytest.approx(0.475)
    assert bots["botA"].marked_rate == pytest.approx(0.5)
    assert bots["botB"].mean_score == pytest.approx(1 / 3) and bots["botB"].marked_rate == pytest.approx(1 / 3)
    assert bots["botC"].n == 2 and bots["botC"].marked_rate == pytest.approx(0.5)
    assert bots["botD"].mean_score == pytest.approx(0.2 / 3) and bots["botD"].marked_rate == 0
    assert m.bots_too_few == ("botC",) and not bots["botC"].kept
    # r over (0.475, 0.5), (1/3, 1/3), (1/15, 0): 0.105556 / sqrt(0.129630 * 0.085972)
    assert m.pearson_r == pytest.approx(0.99989, abs=1e-4)

    # The table prints every group's size, the empty one as empty with its note.
    table = run.table
    assert "fire rate [bot@1] (n=3, marked 2)" in table
    assert "fire rate [human] (n=9, marked 0)" in table
    row = next(line for line in table.splitlines() if "[bot@2]" in line)
    assert "(n=0, marked 0)" in row and row.rstrip().endswith("empty")
    assert ("bot@2: empty: no bot utterance where exactly 2 annotator(s) agreed on the "
            "contradiction label in this file") in table
    assert "1 bot utterance(s) with annotators agreeing but no `contradiction: true`" in table
    assert "7 record(s) of 5 conversation(s) (2 truncated cop(ies) merged" in table
    assert "botC" in table and "n/a" not in table
    assert "NLI-only" in table and run.report["detector_kind"] == "nli"
    report = json.loads((out / "decode-human-bot-structured.report.json").read_text())
    assert report["metrics"]["f1"] == pytest.approx(4 / 7)
    assert report["metrics"]["n_by_group"]["bot@2"] == 0 and report["empty_groups"] == ["bot@2"]
    assert report["agreement_fields"] == [ORIG, NEW]
    assert (report["first_turns_skipped"], report["truncated_copies"]) == (5, 2)

    # Resume: a rerun sends nothing; a torn last line is rescored alone.
    before = len(api.paths)
    again = _run(path, out, api, chunk_size=4)
    assert again.scored_now == 0 and again.metrics == m
    assert not [p for p in api.paths[before:] if p.endswith("/v1/contradiction")]
    store = out / "decode-human-bot-structured.predictions.jsonl"
    text = store.read_text()
    store.write_text(text[:-20])
    third = _run(path, out, api, chunk_size=4)
    assert third.scored_now == 1 and third.metrics == m
    with pytest.raises(ValueError, match="other settings|choose another output folder"):
        _run(path, out, api, threshold=0.95)


def _without(field, turn_id=3):
    """LOG with `field` removed from a@3's auxiliary."""
    records = json.loads(json.dumps(LOG))
    del records[0]["turns"][turn_id]["auxiliary"][field]
    return records


def test_a_log_without_the_fields_is_refused_naming_them(tmp_path, capsys):
    plain = [{**r, "turns": [{**t, "auxiliary": {"contradiction": None}} for t in r["turns"]]}
             for r in LOG]
    with pytest.raises(ValueError, match=f"no turn's auxiliary has {ORIG} or {NEW}"):
        read_human_bot(_write(tmp_path, plain))
    # Through the command line, before any request (nothing listens at the URL): exit status 1
    # and the fields named.
    code = main(["eval", "decode-human-bot", "--url", "http://127.0.0.1:9", "--data",
                 str(_write(tmp_path, plain, "plain.jsonl")), "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert code == 1 and f"no turn's auxiliary has {ORIG} or {NEW}" in err
    # One bot turn without one count, or without its label, in every copy of it.
    with pytest.raises(ValueError, match=f"record 0, turn 3: the bot turn's auxiliary lacks {NEW}"):
        expand_human_bot(_without(NEW))
    with pytest.raises(ValueError, match="lacks contradiction "):
        expand_human_bot(_without("contradiction"))
    # A human turn needs none of them.
    assert len(expand_human_bot(_without("contradiction", turn_id=2)).utterances) == 21


@pytest.mark.parametrize("value, message", [
    (True, f"auxiliary.{ORIG} must be a non-negative integer or null, got True"),
    ("2", f"auxiliary.{ORIG} must be a non-negative integer or null, got '2'"),
    (-1, f"auxiliary.{ORIG} must be a non-negative integer or null, got -1"),
    (2, f"{ORIG} \\+ {NEW} = 4; at most 3 annotators"),
])
def test_bad_counts_are_refused_naming_the_field(value, message):
    records = json.loads(json.dumps(LOG))
    records[0]["turns"][3]["auxiliary"][ORIG] = value  # a@3: new count 2
    with pytest.raises(ValueError, match=message):
        expand_human_bot(records)


def test_copies_must_agree_on_each_turn_id():
    records = json.loads(json.dumps(LOG))
    records[2]["turns"][1]["text"] = "hey you ."  # b#truncated#1's turn 1 differs from b's
    with pytest.raises(ValueError, match="conversation 'b' has turn 1 already"):
        expand_human_bot(records)
    records = json.loads(json.dumps(LOG))
    records[2]["auxiliary"]["original_model"] = "botZ"
    with pytest.raises(ValueError, match="names another bot in auxiliary.original_model"):
        expand_human_bot(records)


def test_another_formats_count_field_by_annotator_key():
    records = json.loads(json.dumps(LOG))
    for r in records:
        for t in r["turns"]:
            aux = t["auxiliary"]
            if ORIG in aux:
                aux["votes"] = [1] * ((aux.pop(ORIG) or 0) + (aux.pop(NEW) or 0)) + [0]
    log = expand_human_bot(records, annotator_key="votes")
    assert {u.id: u.annotators for u in log.utterances if u.annotators} == {
        "a@3": 3, "a@5": 1, "b@2": 1, "c@3": 3, "d@2": 1}
    with pytest.raises(ValueError, match="no turn's auxiliary has votes"):
        expand_human_bot(LOG, annotator_key="votes")


def test_the_shared_rct_file_is_not_a_human_bot_log():
    """DECODE's RCT set (../shared) carries `contradiction` but no verifier counts: refused."""
    path = shared_file("data/decode/rct.jsonl")
    with pytest.raises(ValueError, match=f"{ORIG} or {NEW}"):
        read_human_bot(path)


def test_plot_written_with_matplotlib(tmp_path):
    run = _run(_write(tmp_path), tmp_path / "out", ContractFake())
    png = run.files["plot"]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_nan_free_and_pearson_none_with_one_bot(tmp_path):
    path = tmp_path / "one.jsonl"
    path.write_text(json.dumps(LOG[0]) + "\n")
    run = _run(path, tmp_path / "out", ContractFake(), plot=False)
    assert run.metrics.pearson_r is None and run.metrics.bots_too_few == ()
    assert not math.isnan(run.metrics.roc_auc)
