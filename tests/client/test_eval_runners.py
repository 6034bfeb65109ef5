"""The evaluation runners against the contract fake (tests/client/contract_fake.py): exact metrics
from known scores, what is sent (items, chunks, speakers), ties, unscored instances, empty
variants, the sync wrapper."""

from __future__ import annotations

import asyncio
import json

import pytest

from dialscore.client import AsyncDialscoreClient
from dialscore.model_card import ModelCard
from dialscore.evals.decode import Prediction, read_decode
from dialscore.evals.decode_metrics import decode_metrics
from dialscore.evals.robustness import KINDS, mean_share, synonym_replacements
from dialscore.evals.robustness_stats import variant_stats
from dialscore.evals.runners.decode import arun_decode
from dialscore.evals.runners.mutual import arun_mutual, run_mutual
from dialscore.evals.runners.robustness import arun_robustness
from contract_fake import ContractFake

#: The served models: a dialogue model and a classifier, with the revisions reports must carry.
CARDS = [
    ModelCard(name="fake-gpt", family="causal", source="fake/gpt", revision="abc123",
              max_length=1024, dtype="float32", device="cpu", stand_in=True),
    ModelCard(name="fake-nli", family="classifier", source="fake/nli", revision="def456",
              max_length=512, dtype="float32", device="cpu", stand_in=False,
              labels=["contradiction", "neutral", "entailment"], contradiction_index=0),
]


def fake_service(nll=lambda context, target: float(len(target.split())),
                prob=lambda text: 0.9 if "never" in text else 0.1) -> ContractFake:
    """The contract fake (tests/client/contract_fake.py): the NLL of an item is
    `nll(context, target)`; an NLI pair's contradiction probability is `prob(hypothesis)`, so the
    documented detection gives a last turn `prob(its text)` when its speaker spoke before
    (structured), with those earlier turns as evidence above the evidence threshold, and the
    rerank scores a candidate ``-prob(candidate)`` when its speaker spoke before, else 0."""
    return ContractFake(CARDS, scorer=lambda model, item: nll(item.get("context", []), item["target"]),
                   classifier=lambda premise, hypothesis: prob(hypothesis))


def _run(coro):
    return asyncio.run(coro)


def _client(service: ContractFake, **kw) -> AsyncDialscoreClient:
    return AsyncDialscoreClient("http://fake", transport=service.transport(), **kw)


async def _with(service: ContractFake, make, **kw):
    async with _client(service, **kw) as client:
        return await make(client)


MUTUAL = [
    {"id": "d_1", "answers": "B", "article": "m : hi . f : hello there .",
     "options": ["m : a b c", "m : a", "m : a b", "m : a b c d"]},      # gold shortest: rank 1
    {"id": "d_2", "answers": "D", "article": "f : how are you ?",
     "options": ["m : x y", "m : x y", "m : x y", "m : x y"]},          # all tied: gold last
    {"id": "d_3", "answers": "", "article": "m : bye .",
     "options": ["f : q", "f : q r", "f : q r s", "f : q r s t"]},      # no gold: not scored
    {"id": "d_10", "answers": "A", "article": "m : so ? f : well .",
     "options": ["f : one two", "f : one", "m : one two three", "m : x"]},  # gold rank 3
]


def _mutual_file(tmp_path):
    path = tmp_path / "mutual.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in MUTUAL))
    return path


def test_mutual_nll_metrics_ties_export_and_requests(tmp_path):
    service = fake_service()  # nll = number of target words: fewer words rank higher
    run = _run(_with(service, lambda c: arun_mutual(c, _mutual_file(tmp_path), "nll", "fake-gpt",
                                                   tmp_path / "out", progress=False)))
    assert [r.gold_rank for r in run.rankings] == [1, 4, None, 3]
    m = run.metrics
    assert (m.n, m.n_scored, m.n_unscored) == (4, 3, 1)
    assert m.r_at_1 == pytest.approx(1 / 3) and m.r_at_2 == pytest.approx(1 / 3)
    assert m.mrr == pytest.approx((1 + 1 / 4 + 1 / 3) / 3)
    assert run.scores[0] == [-3.0, -1.0, -2.0, -4.0]
    lines = (tmp_path / "out" / "mutual-nll-fake-gpt.ranked.txt").read_text().splitlines()
    assert lines == ["d_1\tB\tC\tA\tD", "d_2\tA\tB\tC\tD", "d_3\tA\tB\tC\tD", "d_10\tB\tD\tA\tC"]
    # Context = the article's turn texts; target = the option without its marker; identical
    # (context, target) items sent once.
    items = [i for b in service.bodies["/v1/nll"] for i in b["items"]]
    assert {"context": ["hi .", "hello there ."], "target": "a b"} in items
    assert len(items) == 16 - 3
    report = json.loads((tmp_path / "out" / "mutual-nll-fake-gpt.report.json").read_text())
    assert report["models"]["fake-gpt"]["revision"] == "abc123"
    assert report["models"]["fake-gpt"]["stand_in"] is True
    assert report["gold_tied"] == 1 and report["metrics"]["n_unscored"] == 1
    assert "1 instance(s) without a gold answer" in run.table


def test_mutual_rerank_one_request_per_option_speaker(tmp_path):
    service = fake_service(prob=lambda text: {"one": 0.2, "one two": 0.1}.get(text, 0.5))
    run = _run(_with(service, lambda c: arun_mutual(c, _mutual_file(tmp_path), "rerank", None,
                                                   tmp_path, progress=False)))
    bodies = service.bodies["/v1/rerank"]
    assert len(bodies) == 5  # d_10's options have two speakers
    d10 = sorted((b for b in bodies if b["context"][0]["text"] == "so ?"), key=lambda b: b["speaker"])
    assert [(b["speaker"], b["candidates"]) for b in d10] == [
        ("f", ["one two", "one"]), ("m", ["one two three", "x"])]
    assert d10[0]["context"] == [{"id": 0, "speaker": "m", "text": "so ?"},
                                 {"id": 1, "speaker": "f", "text": "well ."}]
    assert run.scores[3] == [-0.1, -0.2, -0.5, -0.5]
    # d_2's options are m's, who never spoke: the service refuses the rerank (nothing to
    # contradict) and the scorer ties them at 0.0, as the contradiction scorer's 1 - 0 would.
    assert run.scores[1] == [0.0] * 4 and run.rankings[1].gold_rank == 4
    assert run.rankings[3].gold_rank == 1
    assert run.report["models"]["fake-nli"]["source"] == "fake/nli"
    assert (tmp_path / "mutual-rerank-fake-nli.ranked.txt").is_file()


def test_nll_scorer_needs_a_served_dialogue_model(tmp_path):
    path = _mutual_file(tmp_path)
    with pytest.raises(ValueError, match="needs a dialogue"):
        _run(_with(fake_service(), lambda c: arun_mutual(c, path, "nll", None, tmp_path)))
    with pytest.raises(ValueError, match="fake-nli' is a classifier"):
        _run(_with(fake_service(), lambda c: arun_mutual(c, path, "nll", "fake-nli", tmp_path)))
    with pytest.raises(ValueError, match="did you mean 'fake-gpt'"):
        _run(_with(fake_service(), lambda c: arun_mutual(c, path, "nll", "fake-gtp", tmp_path)))


def _decode_record(cid, texts, evidence):
    return {"record_id": cid, "auxiliary": {"source": "bot" if "b" in cid else "human"},
            "turns": [{"turn_id": i, "agent_id": i % 2, "text": t} for i, t in enumerate(texts)],
            "is_contradiction": bool(evidence),
            "aggregated_contradiction_indices": evidence + [len(texts) - 1] if evidence else []}


DECODE = [
    _decode_record("c1", ["i have dogs .", "nice .", "i never had dogs ."], [0]),         # TP
    _decode_record("c2", ["i am tall .", "ok .", "yes .", "and ?", "i am short ."], [0]),  # FN
    _decode_record("b3", ["hi .", "hey .", "i never sleep ."], []),                         # FP
    _decode_record("b4", ["hi .", "hey .", "bye ."], []),                                   # TN
    _decode_record("b5", ["a .", "b .", "c .", "d .", "e ."], []),                          # TN
]


def test_decode_metrics_chunks_modes_and_diagnostics(tmp_path):
    path = tmp_path / "decode.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in DECODE))
    service = fake_service()
    run = _run(_with(service, lambda c: arun_decode(c, path, tmp_path / "out", chunk_size=2,
                                                   seed=5, progress=False)))
    gold = read_decode(path)
    s = run.metrics["original"]["structured"]
    want = decode_metrics(gold, [Prediction(True, 0.9, frozenset({0})), Prediction(False, 0.1),
                                 Prediction(True, 0.9, frozenset({0})), Prediction(False, 0.1),
                                 Prediction(False, 0.1)])
    assert s == want
    assert (s.accuracy, s.strict_accuracy, s.evidence_f1) == (0.6, 0.6, 0.5)
    assert s.fire_rate_by_group == {"bot": 1 / 3, "human": 0.5}
    u = run.metrics["original"]["unstructured"]
    # Unstructured returns no evidence: its strict accuracy and evidence figures are n/a.
    assert u.accuracy == 0.6 and u.strict_accuracy == "n/a" and u.evidence_recall == "n/a"
    assert u.evidence_f1_paper == "n/a" and u.strict_accuracy_paper == "n/a"
    # Paper scope leaves out b3's evidence (a gold non-contradiction): tp 1 (c1), fn 1 (c2).
    assert s.evidence_f1_paper == 2 / 3 and s.n_other_speaker_gold_evidence == 0
    # Chunks of at most 2 dialogues; every (set, mode) sent.
    sent = service.bodies["/v1/contradiction"]
    assert max(len(b["dialogues"]) for b in sent) == 2
    assert {(b["mode"], len(b["dialogues"])) for b in sent} >= {("structured", 1), ("unstructured", 2)}
    assert sum(len(b["dialogues"]) for b in sent) == 2 * (5 + 2 + 1)
    # A2T / RCT from the two annotated contradictions, written and evaluated.
    assert run.skipped == {"a2t": 3, "rct": 3}
    # c1's RCT keeps only its last turn (no earlier turn by its speaker): dropped, as in the
    # official RCT set.
    assert [d.meta["source_id"] for d in run.sets["rct"]] == ["c2"]
    assert run.report["diagnostics"]["rct"] == {"n": 1, "skipped": 3, "dropped": 1}
    assert "1 dropped" in run.table
    assert "NLI-only" in run.table and run.report["detector_kind"] == "nli"
    with pytest.raises(ValueError, match="detector kind"):
        _run(_with(fake_service(), lambda c: arun_decode(c, path, tmp_path / "o2", progress=False,
                                                       detector_kind="roberta")))
    assert [len(d.turns) for d in run.sets["a2t"]] == [5, 7]
    assert read_decode(tmp_path / "out" / "decode-a2t.jsonl") == run.sets["a2t"]
    assert run.metrics["rct"]["structured"].accuracy == 1.0
    header = run.table.splitlines()[1]
    for col in ("original/structured", "original/unstructured", "a2t/structured", "rct/unstructured"):
        assert col in header
    rows = json.loads((tmp_path / "out" / "decode.json").read_text())
    assert len(rows) == 8 and rows[0]["structured_evidence"] == [0]


ROBUST = [
    {"id": "r_1", "answers": "A", "article": "f : what did you buy ? m : nothing .",
     "options": ["f : i bought a new car in paris .", "f : x", "f : y", "f : z"]},
    {"id": "r_2", "answers": "B", "article": "m : is it ?",
     "options": ["m : x", "m : it is the", "m : y", "m : z"]},  # only stopwords: some variants empty
]


def test_robustness_statistics_and_empty_variants(tmp_path):
    path = tmp_path / "robust.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in ROBUST))
    service = fake_service(nll=lambda context, target: len(target))
    run = _run(_with(service, lambda c: arun_robustness(c, path, "nll", "fake-gpt", None, 0,
                                                       tmp_path / "out", progress=False)))
    assert run.corpus == "mutual" and [i.id for i in run.items] == ["r_1", "r_2"]
    assert run.scores[1]["no_stopwords_25"] is None  # "it is the" without stopwords is empty
    assert run.stats["no_stopwords_25"].n_missing == 1
    for kind in KINDS:
        expected = [None if not run.variants[kind][k].strip() else -float(len(run.variants[kind][k]))
                    for k in range(2)]
        assert [s[kind] for s in run.scores] == expected
        assert run.stats[kind] == variant_stats([s["original"] for s in run.scores], expected, kind)
    assert run.scores[0]["original"] == -float(len("i bought a new car in paris ."))
    # MuTual style generic replies; nothing empty is sent.
    targets = [i["target"] for b in service.bodies["/v1/nll"] for i in b["items"]]
    assert "i 'm sorry , can you repeat ?" in targets and all(t.strip() for t in targets)
    assert (tmp_path / "out" / "robustness-nll-fake-gpt.png").read_bytes()[:4] == b"\x89PNG"
    variants = json.loads((tmp_path / "out" / "robustness-nll-fake-gpt-variants.json").read_text())
    assert [v["kind"] for v in variants] == ["original", *KINDS]
    # The share of content words the synonym variant replaced, in the run, the JSON and the table.
    share = run.synonym_share
    assert share == mean_share(synonym_replacements([i.response.text for i in run.items]))
    assert share["eligible"] >= share["replaced"] > 0 and 0 < share["mean_item_share"] <= 1
    report = json.loads((tmp_path / "out" / "robustness-nll-fake-gpt.report.json").read_text())
    assert report["synonym_share"]["mean_item_share"] == pytest.approx(share["mean_item_share"])
    assert f"synonyms: {100 * share['mean_item_share']:.1f}% of eligible content words" in run.table
    per_item = [r["replaced_share"] for r in run.rows if r["kind"] == "synonyms"]
    assert per_item[0] == share["mean_item_share"] and per_item[1] is None  # "it is the": none
    assert all(r["replaced_share"] is None for r in run.rows if r["kind"] != "synonyms")


def test_robustness_contradiction_scorer_scores_one_minus_probability(tmp_path):
    path = tmp_path / "decode.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in DECODE))
    service = fake_service(prob=lambda text: 0.8 if "never" in text else 0.3)
    run = _run(_with(service, lambda c: arun_robustness(
        c, path, "contradiction", None, None, 0, tmp_path, kinds=("reversed", "generic_sorry"),
        plot=False, progress=False)))
    assert run.corpus == "decode" and len(run.items) == 5
    assert run.scores[0] == {"original": pytest.approx(0.2), "reversed": pytest.approx(0.2),
                             "generic_sorry": pytest.approx(0.7)}
    sent = service.bodies["/v1/contradiction"]
    last = [d["turns"][-1] for b in sent for d in b["dialogues"]]
    assert {"id": 2, "speaker": "0", "text": "i never had dogs ."} in last
    assert not (tmp_path / "robustness-contradiction-fake-nli.png").exists()
    assert run.synonym_share is None and "synonyms:" not in run.table  # not requested


def test_sync_wrapper(tmp_path):
    async def inside():
        with pytest.raises(RuntimeError, match="running event loop"):
            run_mutual("http://fake", _mutual_file(tmp_path))

    asyncio.run(inside())
    with pytest.raises(TypeError, match="arun_mutual"):
        run_mutual(_client(fake_service()), _mutual_file(tmp_path))


def test_progress_bars_and_limit(tmp_path, capsys):
    run = _run(_with(fake_service(), lambda c: arun_mutual(
        c, _mutual_file(tmp_path), "nll", "fake-gpt", tmp_path, limit=2, progress=True)))
    assert [i.id for i in run.instances] == ["d_1", "d_2"] and run.report["instances_read"] == 4
    assert "mutual nll fake-gpt" in capsys.readouterr().err


def test_cli_robustness(tmp_path, monkeypatch, capsys):
    from dialscore.cli import main
    from dialscore.commands import service_args

    service = fake_service()
    monkeypatch.setattr(service_args, "async_client_from_args", lambda args: _client(service))
    path = tmp_path / "robust.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in ROBUST))
    code = main(["eval", "robustness", "--data", str(path), "--scorer", "rerank", "--n", "1",
                 "--seed", "2", "--kinds", "reversed,generic_will_do", "--out", str(tmp_path / "o"),
                 "--no-progress"])
    assert code == 0
    assert "generic_will_do" in capsys.readouterr().out
    report = json.loads((tmp_path / "o" / "robustness-rerank-fake-nli.report.json").read_text())
    assert report["kinds"] == ["reversed", "generic_will_do"] and report["n_items"] == 1
    assert len(service.bodies["/v1/rerank"]) == 1
    assert (tmp_path / "o" / "robustness-rerank-fake-nli.png").is_file()
    code = main(["eval", "robustness", "--data", str(path), "--kinds", "nope", "--model",
                 "fake-gpt", "--out", str(tmp_path / "o"), "--no-progress"])
    assert code == 1 and "unknown perturbations" in capsys.readouterr().err
