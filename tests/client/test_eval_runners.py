"""The evaluation runners against a fake service (no Ray): exact metrics from known scores, what
is sent (items, chunks, speakers), ties, unscored instances, empty variants, the sync wrapper."""

from __future__ import annotations

import asyncio
import json
import threading

import httpx
import pytest

from dialscore.client import AsyncDialscoreClient
from dialscore.evals.decode import Prediction, decode_metrics, read_decode
from dialscore.evals.robustness import KINDS, variant_stats
from dialscore.evals.runners.decode import arun_decode
from dialscore.evals.runners.mutual import arun_mutual, run_mutual
from dialscore.evals.runners.robustness import arun_robustness

MODELS = [
    {"name": "fake-gpt", "family": "causal", "source": "fake/gpt", "revision": "abc123",
     "stand_in": True},
    {"name": "fake-nli", "family": "classifier", "source": "fake/nli", "revision": "def456",
     "stand_in": False},
]


class FakeService:
    """/v1/models, /v1/nll (nll = `nll(context, target)`), /v1/contradiction (probability =
    `prob(last text)`, evidence = earlier same-speaker turns when structured and above the evidence
    threshold), /v1/rerank (score = -prob(candidate)); any other GET is a 404 (no published
    limits). Records every body."""

    def __init__(self, nll=lambda context, target: float(len(target.split())),
                 prob=lambda text: 0.9 if "never" in text else 0.1):
        self.nll, self.prob = nll, prob
        self.bodies: dict[str, list[dict]] = {"/v1/nll": [], "/v1/contradiction": [], "/v1/rerank": []}
        self.lock = threading.Lock()

    def client(self, **kw) -> AsyncDialscoreClient:
        return AsyncDialscoreClient("http://fake", transport=httpx.MockTransport(self.handle), **kw)

    def handle(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if path == "/v1/models":
            return httpx.Response(200, json={"models": MODELS})
        if request.method == "GET":  # GET /openapi.json: this fake publishes no limits
            return httpx.Response(404, json={"error": {"type": "not_found", "message": path}})
        body = json.loads(request.content)
        with self.lock:
            self.bodies[path].append(body)
        if path == "/v1/nll":
            return httpx.Response(200, json={"model": body["model"], "results": [
                {"nll": self.nll(i["context"], i["target"]), "num_tokens": 3} for i in body["items"]]})
        if path == "/v1/contradiction":
            thr = body.get("threshold", 0.5)
            ev_thr = body.get("evidence_threshold", thr)
            results = []
            for d in body["dialogues"]:
                *earlier, last = d["turns"]
                p = self.prob(last["text"])
                ev = [{"turn": t["id"], "probability": p} for t in earlier
                      if body.get("mode", "structured") == "structured"
                      and t["speaker"] == last["speaker"] and p > ev_thr and earlier]
                results.append({"is_contradiction": p > thr, "probability": p, "evidence": ev})
            return httpx.Response(200, json={"model": "fake-nli", "stand_in": False,
                                             "results": results})
        if path == "/v1/rerank":
            res = [{"index": i, "score": -self.prob(c), "contradiction_probability": self.prob(c)}
                   for i, c in enumerate(body["candidates"])]
            res.sort(key=lambda r: -r["score"])
            return httpx.Response(200, json={"model": "fake-nli", "results": res})
        return httpx.Response(404, json={"error": {"type": "not_found", "message": path}})


def _run(coro):
    return asyncio.run(coro)


async def _with(service: FakeService, make, **kw):
    async with service.client(**kw) as client:
        return await make(client)


MUTUAL = [
    {"id": "d_1", "answers": "B", "article": "m : hi . f : hello there .",
     "options": ["m : a b c", "m : a", "m : a b", "m : a b c d"]},      # gold shortest: rank 1
    {"id": "d_2", "answers": "D", "article": "f : how are you ?",
     "options": ["m : x y", "m : x y", "m : x y", "m : x y"]},          # all tied: gold last
    {"id": "d_3", "answers": "", "article": "m : bye .",
     "options": ["f : q", "f : q r", "f : q r s", "f : q r s t"]},      # no gold: not scored
    {"id": "d_10", "answers": "A", "article": "m : so ?",
     "options": ["f : one two", "f : one", "m : one two three", "m : x"]},  # gold rank 3
]


def _mutual_file(tmp_path):
    path = tmp_path / "mutual.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in MUTUAL))
    return path


def test_mutual_nll_metrics_ties_export_and_requests(tmp_path):
    service = FakeService()  # nll = number of target words: fewer words rank higher
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
    service = FakeService(prob=lambda text: {"one": 0.2, "one two": 0.1}.get(text, 0.5))
    run = _run(_with(service, lambda c: arun_mutual(c, _mutual_file(tmp_path), "rerank", None,
                                                   tmp_path, progress=False)))
    bodies = service.bodies["/v1/rerank"]
    assert len(bodies) == 5  # d_10's options have two speakers
    d10 = sorted((b for b in bodies if b["context"][0]["text"] == "so ?"), key=lambda b: b["speaker"])
    assert [(b["speaker"], b["candidates"]) for b in d10] == [
        ("f", ["one two", "one"]), ("m", ["one two three", "x"])]
    assert d10[0]["context"] == [{"id": 0, "speaker": "m", "text": "so ?"}]
    assert run.scores[3] == [-0.1, -0.2, -0.5, -0.5]
    assert run.rankings[3].gold_rank == 1
    assert run.report["models"]["fake-nli"]["source"] == "fake/nli"
    assert (tmp_path / "mutual-rerank-fake-nli.ranked.txt").is_file()


def test_nll_scorer_needs_a_served_dialogue_model(tmp_path):
    path = _mutual_file(tmp_path)
    with pytest.raises(ValueError, match="needs a dialogue"):
        _run(_with(FakeService(), lambda c: arun_mutual(c, path, "nll", None, tmp_path)))
    with pytest.raises(ValueError, match="fake-nli' is a classifier"):
        _run(_with(FakeService(), lambda c: arun_mutual(c, path, "nll", "fake-nli", tmp_path)))
    with pytest.raises(ValueError, match="did you mean 'fake-gpt'"):
        _run(_with(FakeService(), lambda c: arun_mutual(c, path, "nll", "fake-gtp", tmp_path)))


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
    service = FakeService()
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
    assert u.accuracy == 0.6 and u.strict_accuracy == 0.4 and u.evidence_recall == 0.0
    # Chunks of at most 2 dialogues; every (set, mode) sent.
    sent = service.bodies["/v1/contradiction"]
    assert max(len(b["dialogues"]) for b in sent) == 2
    assert {(b["mode"], len(b["dialogues"])) for b in sent} >= {("structured", 1), ("unstructured", 2)}
    assert sum(len(b["dialogues"]) for b in sent) == 2 * (5 + 2 + 2)
    # A2T / RCT from the two annotated contradictions, written and evaluated.
    assert run.skipped == {"a2t": 3, "rct": 3}
    assert [d.is_contradiction for d in run.sets["rct"]] == [False, False]
    assert [len(d.turns) for d in run.sets["a2t"]] == [5, 7]
    assert read_decode(tmp_path / "out" / "decode-a2t.jsonl") == run.sets["a2t"]
    assert run.metrics["rct"]["structured"].accuracy == 0.5  # c1's "never" still fires
    header = run.table.splitlines()[1]
    for col in ("original/structured", "original/unstructured", "a2t/structured", "rct/unstructured"):
        assert col in header
    rows = json.loads((tmp_path / "out" / "decode.json").read_text())
    assert len(rows) == 9 and rows[0]["structured_evidence"] == [0]


ROBUST = [
    {"id": "r_1", "answers": "A", "article": "f : what did you buy ? m : nothing .",
     "options": ["f : i bought a new car in paris .", "f : x", "f : y", "f : z"]},
    {"id": "r_2", "answers": "B", "article": "m : is it ?",
     "options": ["m : x", "m : it is the", "m : y", "m : z"]},  # only stopwords: some variants empty
]


def test_robustness_statistics_and_empty_variants(tmp_path):
    path = tmp_path / "robust.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in ROBUST))
    service = FakeService(nll=lambda context, target: len(target))
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


def test_robustness_contradiction_scorer_scores_one_minus_probability(tmp_path):
    path = tmp_path / "decode.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in DECODE))
    service = FakeService(prob=lambda text: 0.8 if "never" in text else 0.3)
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


def test_sync_wrapper(tmp_path):
    async def inside():
        with pytest.raises(RuntimeError, match="running event loop"):
            run_mutual("http://fake", _mutual_file(tmp_path))

    asyncio.run(inside())
    with pytest.raises(TypeError, match="arun_mutual"):
        run_mutual(FakeService().client(), _mutual_file(tmp_path))


def test_progress_bars_and_limit(tmp_path, capsys):
    run = _run(_with(FakeService(), lambda c: arun_mutual(
        c, _mutual_file(tmp_path), "nll", "fake-gpt", tmp_path, limit=2, progress=True)))
    assert [i.id for i in run.instances] == ["d_1", "d_2"] and run.report["instances_read"] == 4
    assert "mutual nll fake-gpt" in capsys.readouterr().err


def test_cli_robustness(tmp_path, monkeypatch, capsys):
    from dialscore.cli import main
    from dialscore.commands import service_args

    service = FakeService()
    monkeypatch.setattr(service_args, "async_client_from_args", lambda args: service.client())
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
