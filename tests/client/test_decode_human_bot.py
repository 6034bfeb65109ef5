"""DECODE's human-bot analyses on a hand-made annotated log of four bots, scored by the contract
fake (tests/client/contract_fake.py: the documented structured detection over the negation
classifier: 0.9 when the utterance negates and shares a word with an earlier utterance of its
speaker, 0.1 otherwise, 0.0 with no earlier utterance of its speaker). Every expected figure below was computed by hand."""

from __future__ import annotations

import asyncio
import json
import math

import pytest

from dialscore.client import AsyncDialscoreClient
from dialscore.evals.decode_human_bot import annotator_count, read_human_bot
from dialscore.evals.runners.decode_human_bot import arun_decode_human_bot
from contract_fake import ContractFake

AGENTS = {"0": {"is_human": True}, "1": {"is_human": False}}


def _record(cid, bot, turns):
    """turns: (agent, text, turn auxiliary)."""
    return {"conversation_id": cid, "agents": AGENTS, "auxiliary": {"original_model": bot},
            "turns": [{"turn_id": i, "agent_id": a, "text": t, "auxiliary": aux}
                      for i, (a, t, aux) in enumerate(turns)],
            "is_contradiction": False, "aggregated_contradiction_indices": []}


N = {"contradiction": False}
LOG = [
    _record("a", "botA", [
        (0, "hi there .", N),
        (1, "i have a cat .", N),                                           # 0.0
        (0, "nice .", N),                                                   # human 0.1
        (1, "i do not have a cat .", {"contradiction": True, "votes": [1, 1, 1]}),  # 0.9 TP @3
        (0, "no way .", N),                                                 # human 0.9 (fires)
        (1, "i like dogs .", {"contradiction": True, "votes": [1, 0, 0]})]),  # 0.1 FN @1
    _record("b", "botA", [
        (1, "hello .", N),
        (0, "hey .", N),                                                    # human 0.0
        (1, "i never say hello .", N)]),                                    # 0.9 FP
    _record("b#truncated#1", "botA", [(1, "hello .", N), (0, "hey .", N)]),  # a copy: deduplicated
    _record("c", "botB", [
        (0, "hello .", N),
        (1, "i am tall .", N),                                              # 0.0
        (0, "cool .", N),                                                   # human 0.1
        (1, "i am not tall .", {"contradiction": True, "votes": [True, True, False]}),  # 0.9 TP @2
        (0, "ok .", N),                                                     # human 0.1
        (1, "i am short .", N)]),                                           # 0.1
    _record("d", "botC", [
        (1, "yo .", N),
        (0, "hi .", N),                                                     # human 0.0
        (1, "fine .", {"contradiction": True})]),                           # 0.1 FN, 1 annotator
    _record("e", "botD", [
        (0, "hi .", N),
        (1, "i run .", N),                                                  # 0.0
        (0, "ok .", N),                                                     # human 0.1
        (1, "i run far .", N),                                              # 0.1
        (0, "no .", N),                                                     # human 0.9 (fires)
        (1, "i swim .", N)]),                                               # 0.1
]


def _write(tmp_path):
    path = tmp_path / "human_bot.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in LOG))
    return path


def _run(path, out, api, **kw):
    async def go():
        async with AsyncDialscoreClient("http://fake", transport=api.transport()) as client:
            return await arun_decode_human_bot(client, path, out, min_utterances=3,
                                               progress=False, **kw)
    return asyncio.run(go())


def test_expansion_counts_dedup_and_annotators(tmp_path):
    utterances, skipped, records = read_human_bot(_write(tmp_path))
    assert records == 6 and skipped == 5  # the truncated copy adds nothing
    assert len(utterances) == 19 and sum(not u.is_human for u in utterances) == 11
    u = next(u for u in utterances if u.id == "a@3")
    assert [t.text for t in u.dialogue.turns][-1] == "i do not have a cat ."
    assert len(u.dialogue.turns) == 4 and u.marked and u.annotators == 3 and u.bot == "botA"
    assert annotator_count({"contradiction": True}) == 1
    assert annotator_count({"contradiction": True, "n": 2}, key="n") == 2


def test_hand_computed_figures_resume_and_files(tmp_path):
    path, out, api = _write(tmp_path), tmp_path / "out", ContractFake()
    run = _run(path, out, api, chunk_size=4)
    m = run.metrics
    assert run.scored_now == 19
    assert (m.n_bot, m.n_bot_marked, m.n_human) == (11, 4, 8)
    # bot utterances: TP a@3, c@3; FP b@2; FN a@5, d@2
    assert m.precision == pytest.approx(2 / 3) and m.recall == pytest.approx(0.5)
    assert m.f1 == pytest.approx(4 / 7)
    # positives 0.9, 0.9, 0.1, 0.1 against negatives 0.0 x3, 0.1 x3, 0.9: (2*6.5 + 2*4.5) / 28
    assert m.roc_auc == pytest.approx(11 / 14)
    assert m.fire_rate == pytest.approx({"human": 2 / 8, "bot": 3 / 11, "bot@1": 2 / 4,
                                         "bot@2": 2 / 2, "bot@3": 1 / 1})
    assert m.n_by_group == {"human": 8, "bot": 11, "bot@1": 4, "bot@2": 2, "bot@3": 1}
    bots = {b.bot: b for b in m.per_bot}
    assert bots["botA"].n == 4 and bots["botA"].mean_score == pytest.approx(0.475)
    assert bots["botA"].marked_rate == pytest.approx(0.5)
    assert bots["botB"].mean_score == pytest.approx(1 / 3) and bots["botB"].marked_rate == pytest.approx(1 / 3)
    assert bots["botD"].mean_score == pytest.approx(0.2 / 3) and bots["botD"].marked_rate == 0
    assert m.bots_too_few == ("botC",) and not bots["botC"].kept
    # r over (0.5, .475), (1/3, 1/3), (0, 1/15): sums of products .105556 / sqrt(.129630 * .085972)
    assert m.pearson_r == pytest.approx(0.99989, abs=1e-4)
    assert "botC" in run.table and "n/a" not in run.table
    assert "NLI-only" in run.table and run.report["detector_kind"] == "nli"
    report = json.loads((out / "decode-human-bot-structured.report.json").read_text())
    assert report["metrics"]["f1"] == pytest.approx(4 / 7)
    assert report["first_turns_skipped"] == 5

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


def test_plot_written_with_matplotlib(tmp_path):
    pytest.importorskip("matplotlib")
    run = _run(_write(tmp_path), tmp_path / "out", ContractFake())
    png = run.files["plot"]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_nan_free_and_pearson_none_with_one_bot(tmp_path):
    path = tmp_path / "one.jsonl"
    path.write_text(json.dumps(LOG[0]) + "\n")
    run = _run(path, tmp_path / "out", ContractFake(), plot=False)
    assert run.metrics.pearson_r is None and run.metrics.bots_too_few == ()
    assert not math.isnan(run.metrics.roc_auc)
