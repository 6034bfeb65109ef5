"""The evaluation runners and `dialscore eval` end to end over the real Serve app.

MuTual dev (886 instances) through both scorers, DECODE RCT (2,011 dialogues), the robustness
battery on a sample of MuTual contexts, and the CLI on small hand-made files (official MuTual
folder layout; DECODE dialogues with evidence, so A2T and RCT are generated and evaluated). The
served models are stand-ins: the figures are near chance, so the tests check the shapes, the
arithmetic against the service's own answers, and the reports, not the quality.
"""

from __future__ import annotations

import csv
import json
import math
import time

import httpx
import pytest

from dialscore.cli import main
from dialscore.client import DialscoreClient
from dialscore.evals.decode import read_decode
from dialscore.evals.mutual import read_mutual, split_speaker
from dialscore.evals.robustness import KINDS
from dialscore.evals.runners.decode import run_decode
from dialscore.evals.runners.mutual import run_mutual
from dialscore.evals.runners.robustness import run_robustness
from serve_apps import REQUEST_DEADLINE_S
from shared_data import shared_file

pytestmark = pytest.mark.serve

NLL_MODEL = "dialogpt-medium"  # the re-initialised stand-in: NLLs differ from item to item
CLASSIFIER = "roberta-large-mnli"


@pytest.fixture()
def client(served):
    # Sixteen requests share one replica's engine calls, so each takes about sixteen times its
    # own work: the read timeout is the apps' hang guard, not the client's default 120 s.
    timeout = httpx.Timeout(REQUEST_DEADLINE_S, connect=10.0)
    with DialscoreClient(served.url, max_concurrency=16, timeout=timeout) as c:
        yield c


def _unit(x) -> bool:
    return x is not None and 0.0 <= x <= 1.0


def _check_mutual(run, instances, out_dir, stem):
    assert len(run.rankings) == len(instances) == 886
    m = run.metrics
    assert (m.n, m.n_scored, m.n_unscored) == (886, 886, 0)
    assert all(_unit(v) for v in (m.r_at_1, m.r_at_2, m.mrr))
    assert m.r_at_1 <= m.r_at_2 and 0.25 <= m.mrr and m.r_at_1 <= m.mrr
    # The metrics are those of the rankings, and each ranking follows its scores, ties against gold.
    ranks = [r.gold_rank for r in run.rankings]
    assert m.r_at_1 == pytest.approx(sum(r == 1 for r in ranks) / 886)
    assert m.mrr == pytest.approx(sum(1 / r for r in ranks) / 886)
    for inst, ranking, scores in zip(instances, run.rankings, run.scores):
        assert all(math.isfinite(s) for s in scores)
        ordered = [scores[i] for i in ranking.order]
        assert ordered == sorted(ordered, reverse=True)
        gold = inst.answer
        assert not any(scores[i] == scores[gold] for i in ranking.order[ranking.gold_rank:])
    # The official export: 886 lines, the ids in file order, a permutation of A-D each.
    lines = (out_dir / f"{stem}.ranked.txt").read_text().splitlines()
    assert len(lines) == 886
    for inst, line, ranking in zip(instances, lines, run.rankings):
        fields = line.split("\t")
        assert fields[0] == inst.id and sorted(fields[1:]) == list("ABCD")
        assert tuple(fields[1:]) == ranking.letters()
    with open(out_dir / f"{stem}.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 886 and rows[0]["id"] == instances[0].id
    assert {"gold", "ranked", "gold_rank", "score_A", "score_D"} <= set(rows[0])
    report = json.loads((out_dir / f"{stem}.report.json").read_text())
    assert report["metrics"]["R@1"] == pytest.approx(m.r_at_1)
    assert report["chance"]["R@1"] == pytest.approx(0.25)
    assert "mutual" in (out_dir / f"{stem}.txt").read_text().lower()
    return report


def test_mutual_dev_nll_scorer(client, tmp_path):
    path = shared_file("data/mutual/dev.jsonl")
    instances = read_mutual(path)
    t0 = time.monotonic()
    run = run_mutual(client, path, "nll", NLL_MODEL, tmp_path, progress=False)
    print(f"\nMuTual dev, nll {NLL_MODEL}: {run.metrics.as_row()} in {time.monotonic() - t0:.1f} s")
    report = _check_mutual(run, instances, tmp_path, f"mutual-nll-{NLL_MODEL}")
    prov = report["models"][NLL_MODEL]
    assert prov["stand_in"] is True and prov["source"] and "revision" in prov
    # Scores are the negated NLLs the service gives for (article turns, option without marker).
    inst = instances[7]
    direct = client.nll(NLL_MODEL, [{"context": [t.text for t in inst.context],
                                     "target": split_speaker(o)[1]} for o in inst.options])
    assert run.scores[7] == pytest.approx([-r.nll for r in direct.results], abs=1e-5)


def test_mutual_dev_rerank_scorer(client, tmp_path):
    path = shared_file("data/mutual/dev.jsonl")
    instances = read_mutual(path)
    t0 = time.monotonic()
    run = run_mutual(client, path, "rerank", None, tmp_path, progress=False)
    print(f"\nMuTual dev, rerank: {run.metrics.as_row()} in {time.monotonic() - t0:.1f} s")
    report = _check_mutual(run, instances, tmp_path, f"mutual-rerank-{CLASSIFIER}")
    assert report["models"][CLASSIFIER]["stand_in"] is True
    # Scores are the reranker's, with the options said by their own speaker.
    inst = instances[3]
    speaker = split_speaker(inst.options[0])[0]
    direct = client.rerank([t.to_json() for t in inst.context],
                           [split_speaker(o)[1] for o in inst.options],
                           extra_body={"speaker": speaker})
    by_index = {r.index: r.score for r in direct.results}
    assert run.scores[3] == pytest.approx([by_index[i] for i in range(4)], abs=1e-5)
    assert all(s <= 0 for row in run.scores for s in row)  # -P(contradiction) without an NLL term


def test_decode_rct_end_to_end(client, tmp_path):
    path = shared_file("data/decode/rct.jsonl")
    dialogues = read_decode(path)
    assert len(dialogues) == 2011
    t0 = time.monotonic()
    run = run_decode(client, path, tmp_path, progress=False)
    print(f"\nDECODE RCT, both modes: {time.monotonic() - t0:.1f} s")
    print(run.table)
    for mode in ("structured", "unstructured"):
        m = run.metrics["original"][mode]
        assert (m.n, m.n_gold_contradiction) == (2011, 0)
        assert _unit(m.accuracy) and m.accuracy == pytest.approx(1 - m.fire_rate)
        assert m.roc_auc is None  # one class only
        if mode == "structured":
            assert m.strict_accuracy <= m.accuracy
        assert sum(m.n_by_group.values()) == 2011
    unstructured = run.metrics["original"]["unstructured"]  # returns no evidence: n/a
    assert unstructured.strict_accuracy == "n/a" and unstructured.evidence_precision == "n/a"
    # Structured and unstructured side by side.
    header = run.table.splitlines()[1]
    assert "original/structured" in header and "original/unstructured" in header
    # RCT has no evidence annotations: both diagnostic sets are empty and say what they skipped.
    assert run.skipped == {"a2t": 2011, "rct": 2011} and set(run.sets) == {"original"}
    assert run.report["diagnostics"]["a2t"] == {"n": 0, "skipped": 2011, "dropped": 0}
    assert "2011 skipped" in run.table
    assert len(run.rows) == 2011
    # Predictions are the service's answers for the same dialogues, in each mode.
    some = [0, 1000, 2010]
    for mode in ("structured", "unstructured"):
        direct = client.contradiction([dialogues[i].to_request() for i in some], mode=mode)
        for i, r in zip(some, direct.results):
            p = run.predictions["original"][mode][i]
            assert p.probability == pytest.approx(r.probability, abs=1e-5)
            assert p.is_contradiction == r.is_contradiction
    assert run.report["models"][CLASSIFIER]["stand_in"] is True
    metrics = json.loads((tmp_path / "decode-metrics.json").read_text())
    assert [(r["set"], r["mode"]) for r in metrics] == [("original", "structured"),
                                                        ("original", "unstructured")]


def test_robustness_battery_on_mutual_sample(client, tmp_path):
    path = shared_file("data/mutual/dev.jsonl")
    t0 = time.monotonic()
    run = run_robustness(client, path, "nll", NLL_MODEL, n=20, seed=0, out_dir=tmp_path,
                         progress=False)
    print(f"\nrobustness nll {NLL_MODEL}, 20 MuTual responses: {time.monotonic() - t0:.1f} s")
    print(run.table)
    assert run.corpus == "mutual" and len(run.items) == 20
    assert list(run.stats) == list(KINDS)
    for kind, st in run.stats.items():
        assert st.n + st.n_missing == 20 and st.n >= 15, kind
        assert st.mean is not None and _unit(st.beat_share) and _unit(st.within_1sd)
    for kind in ("jumbled", "reversed", "generic_sorry", "generic_fantastic"):
        assert run.stats[kind].n == 20
    stem = tmp_path / f"robustness-nll-{NLL_MODEL}"
    png = stem.with_suffix(".png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
    with open(stem.with_name(stem.name + ".csv"), newline="") as fh:
        assert len(list(csv.DictReader(fh))) == 20 * len(KINDS)
    report = json.loads(stem.with_name(stem.name + ".report.json").read_text())
    assert set(report["variants"]) == set(KINDS) and report["n_items"] == 20
    assert report["models"][NLL_MODEL]["stand_in"] is True
    # An original's score is the negated NLL the service gives for it.
    item = run.items[0]
    direct = client.nll(NLL_MODEL, [{"context": [t.text for t in item.context],
                                     "target": item.response.text}]).results[0]
    assert run.scores[0]["original"] == pytest.approx(-direct.nll, abs=1e-5)


@pytest.mark.parametrize("scorer,data", [("contradiction", "data/decode/rct.jsonl"),
                                         ("rerank", "data/mutual/dev.jsonl")])
def test_robustness_with_the_classifier_scorers(client, tmp_path, scorer, data):
    run = run_robustness(client, shared_file(data), scorer, None, n=8, seed=1, out_dir=tmp_path,
                         progress=False)
    assert list(run.stats) == list(KINDS) and len(run.items) == 8
    for s in run.scores:
        assert s["original"] is not None
        for v in s.values():
            assert v is None or (0.0 <= v <= 1.0 if scorer == "contradiction" else -1.0 <= v <= 0.0)
    assert run.report["models"][CLASSIFIER]["stand_in"] is True
    assert (tmp_path / f"robustness-{scorer}-{CLASSIFIER}.png").is_file()


# --- the CLI on hand-made files ---------------------------------------------------------------

MUTUAL = [
    {"id": "t_10", "answers": "", "article": "f : where is the bank ? m : next to the park .",
     "options": ["f : thanks , i will walk there .", "f : so it is far from the park .",
                 "f : i see , the bank is in the park .", "f : great , i love swimming ."]},
    {"id": "t_2", "answers": "A", "article": "m : i 'm hungry . f : let 's have pizza .",
     "options": ["m : good idea , i like pizza .", "m : i am not hungry at all .",
                 "m : you hate pizza , right ?", "m : the weather is nice ."]},
    {"id": "t_9", "answers": "C", "article": "m : did you pass the exam ? f : yes , i did .",
     "options": ["m : too bad you failed .", "m : you never take exams .",
                 "m : congratulations !", "m : what exam ?"]},
]


def test_cli_mutual_official_layout(served, tmp_path, capsys):
    folder = tmp_path / "test"
    folder.mkdir()
    for inst in MUTUAL:
        (folder / f"{inst['id']}.txt").write_text(json.dumps(inst))
    out = tmp_path / "out"
    code = main(["eval", "mutual", "--url", served.url, "--data", str(folder), "--scorer", "nll",
                 "--model", NLL_MODEL, "--out", str(out), "--no-progress"])
    assert code == 0
    printed = capsys.readouterr().out
    assert "R@1" in printed and "1 instance(s) without a gold answer" in printed
    lines = (out / f"mutual-nll-{NLL_MODEL}.ranked.txt").read_text().splitlines()
    assert [line.split("\t")[0] for line in lines] == ["t_2", "t_9", "t_10"]  # natural id order
    assert all(sorted(line.split("\t")[1:]) == list("ABCD") for line in lines)
    report = json.loads((out / f"mutual-nll-{NLL_MODEL}.report.json").read_text())
    assert report["metrics"]["n_scored"] == 2 and report["metrics"]["n_unscored"] == 1
    # A model that is not served is refused with exit status 1 and a hint.
    code = main(["eval", "mutual", "--url", served.url, "--data", str(folder), "--scorer", "nll",
                 "--model", "dialogpt-medum", "--out", str(out), "--no-progress"])
    assert code == 1 and "did you mean 'dialogpt-medium'" in capsys.readouterr().err


def _decode_record(cid, turns, evidence):
    return {"record_id": cid, "conversation_id": f"{cid}#0", "auxiliary": {"source": "handmade"},
            "turns": [{"turn_id": i, "agent_id": i % 2, "text": t} for i, t in enumerate(turns)],
            "is_contradiction": bool(evidence),
            "aggregated_contradiction_indices": evidence + [len(turns) - 1] if evidence else []}


DECODE = [
    _decode_record("c1", ["i have two dogs .", "nice , what breed ?", "poodles .", "cool .",
                          "i have never owned a dog ."], [0]),
    _decode_record("c2", ["i live in paris .", "do you like it ?", "yes , a lot .",
                          "where do you work ?", "i have never been to france ."], [0]),
    _decode_record("c3", ["i am a teacher .", "what do you teach ?", "math at a school .",
                          "do you like it ?", "i am unemployed ."], [0, 2]),
    _decode_record("n1", ["hi , how are you ?", "good , and you ?", "fine , thanks ."], []),
]


def test_cli_decode_generates_and_evaluates_the_diagnostic_sets(served, tmp_path, capsys):
    data = tmp_path / "handmade.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in DECODE))
    out = tmp_path / "out"
    code = main(["eval", "decode", "--url", served.url, "--data", str(data), "--out", str(out),
                 "--seed", "3", "--evidence-threshold", "0.0", "--no-progress"])
    assert code == 0
    printed = capsys.readouterr().out
    assert "a2t/unstructured" in printed and "rct/structured" in printed
    report = json.loads((out / "decode.report.json").read_text())
    # c3's RCT (evidence 0 and 2) keeps only its last turn: dropped, as in the official set.
    assert report["diagnostics"] == {"a2t": {"n": 3, "skipped": 1, "dropped": 0},
                                     "rct": {"n": 2, "skipped": 1, "dropped": 1}}
    a2t, rct = read_decode(out / "decode-a2t.jsonl"), read_decode(out / "decode-rct.jsonl")
    assert all(d.is_contradiction and len(d.turns) == 7 for d in a2t)
    assert all(not d.is_contradiction and not d.evidence for d in rct)
    metrics = report["metrics"]
    for name, n_gold in (("original", 3), ("a2t", 3), ("rct", 0)):
        for mode in ("structured", "unstructured"):
            assert metrics[name][mode]["n"] == {"original": 4, "a2t": 3, "rct": 2}[name]
            assert metrics[name][mode]["n_gold_contradiction"] == n_gold
    # Evidence threshold 0: structured mode names every earlier same-speaker turn as evidence.
    assert metrics["original"]["structured"]["evidence_recall"] == 1.0
    with open(out / "decode.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert [r["set"] for r in rows].count("rct") == 2 and len(rows) == 9
