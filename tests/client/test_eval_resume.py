"""Evaluation runs resume like probe runs (dialscore.evals.runners.score_store): a stopped run
scores only what is missing when started again, every job scored exactly once over both; rows
written under another model revision are not reused; invalid rows are re-scored; the output
folder is locked for the run."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from dialscore.client import RetryPolicy
from dialscore.errors import OverloadedError
from dialscore.evals.runners import score_store
from dialscore.evals.runners.decode import arun_decode
from dialscore.evals.runners.mutual import arun_mutual
from dialscore.evals.runners.robustness import arun_robustness
from dialscore.reporting.run_lock import RunFolderInUse, RunLock
from contract_fake import ContractFake
from test_eval_runners import CARDS, DECODE, MUTUAL, ROBUST, _run, _with, fake_service

STORE = "mutual-nll-fake-gpt.scores.jsonl"


def _mutual(service: ContractFake, tmp_path, **client_kw):
    path = tmp_path / "mutual.jsonl"
    tmp_path.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in MUTUAL))
    return _run(_with(service, lambda c: arun_mutual(c, path, "nll", "fake-gpt", tmp_path / "out",
                                                     progress=False), **client_kw))


def _scored(service: ContractFake) -> list[str]:
    """The items the service's engine scored (requests it refused are not in it)."""
    return [json.dumps(item, sort_keys=True) for _, item in service.nll_items]


def _items(service: ContractFake) -> list[str]:
    return [json.dumps(i, sort_keys=True) for b in service.bodies.get("/v1/nll", [])
            for i in b["items"]]


def test_a_finished_run_started_again_sends_nothing(tmp_path):
    first = _mutual(fake_service(), tmp_path)
    again = fake_service()
    second = _mutual(again, tmp_path)
    assert _items(again) == []
    assert second.scores == first.scores and second.metrics == first.metrics
    jobs = first.report["resume"]["jobs_scored"]
    assert jobs == 5  # one job per instance and option speaker: d_10 has two
    assert second.report["resume"] == {"jobs_reused": jobs, "jobs_scored": 0,
                                                  "rows_invalid": 0, "rows_stale": 0}
    assert second.report["models"] == first.report["models"]


def test_a_stopped_run_resumes_and_scores_each_item_once(tmp_path, monkeypatch):
    monkeypatch.setattr(score_store, "BLOCK_JOBS", 1)  # store after every job
    whole = fake_service()
    reference = _mutual(whole, tmp_path / "ref")

    failing = ContractFake(CARDS, scorer=lambda model, item: float(len(item["target"].split())),
                      fail_after=2)  # the service goes down after two NLL requests
    with pytest.raises(OverloadedError):
        _mutual(failing, tmp_path, retry=RetryPolicy(max_attempts=1))
    rows = (tmp_path / "out" / STORE).read_text().splitlines()
    assert len(rows) == 2  # the two jobs scored before it went down

    healthy = fake_service()
    resumed = _mutual(healthy, tmp_path)
    assert resumed.scores == reference.scores and resumed.metrics == reference.metrics
    assert resumed.report["resume"]["jobs_reused"] == 2
    # Over both runs each item was scored exactly once, as in one uninterrupted run.
    scored = Counter(_scored(failing)) + Counter(_scored(healthy))
    assert scored == Counter(_scored(whole))


def test_another_revision_is_not_reused(tmp_path):
    _mutual(fake_service(), tmp_path)
    retrained = [c.model_copy(update={"revision": "sha256:0123456789abcdef"})
                 if c.name == "fake-gpt" else c for c in CARDS]
    service = ContractFake(retrained, scorer=lambda model, item: float(len(item["target"].split())))
    run = _mutual(service, tmp_path)
    assert run.report["resume"] == {"jobs_reused": 0, "jobs_scored": 5,
                                               "rows_invalid": 0, "rows_stale": 5}
    assert len(_items(service)) > 0


def test_invalid_rows_are_rescored(tmp_path):
    first = _mutual(fake_service(), tmp_path)
    store = tmp_path / "out" / STORE
    rows = [json.loads(line) for line in store.read_text().splitlines()]
    rows[0]["scores"] = rows[0]["scores"][:-1]       # parses, but one score short
    rows[1]["scores"][0][0] = None                   # parses, but no value
    store.write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"key": "torn')
    service = fake_service()
    run = _mutual(service, tmp_path)
    assert run.scores == first.scores
    assert run.report["resume"] == {"jobs_reused": 3, "jobs_scored": 2,
                                               "rows_invalid": 3, "rows_stale": 0}
    assert len(_items(service)) == 4 + 1  # d_1's four options, d_2's one distinct option
    assert store.read_text().splitlines()[-3].startswith('{"key": "torn')  # kept, new rows after it


def test_the_output_folder_is_locked_for_the_run(tmp_path):
    with RunLock(tmp_path / "out"):
        with pytest.raises(RunFolderInUse, match="in use by another run"):
            _mutual(fake_service(), tmp_path)
    _mutual(fake_service(), tmp_path)  # released: the next run goes ahead


def test_robustness_resumes(tmp_path):
    path = tmp_path / "robust.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in ROBUST))

    def run(service):
        return _run(_with(service, lambda c: arun_robustness(
            c, path, "rerank", None, None, 0, tmp_path / "out", kinds=("reversed",), plot=False,
            progress=False)))

    first = run(fake_service())
    again = fake_service()
    second = run(again)
    assert second.scores == first.scores
    assert "/v1/rerank" not in again.bodies
    assert second.report["resume"]["jobs_reused"] == len(first.items)
    assert second.report["models"] == first.report["models"]  # the classifier, from the store


def test_decode_resumes_per_mode_and_threshold(tmp_path):
    path = tmp_path / "decode.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in DECODE))

    def run(service, threshold=0.5):
        return _run(_with(service, lambda c: arun_decode(
            c, path, tmp_path / "out", threshold=threshold, diagnostics=[], progress=False)))

    def sent(service):
        return sum(len(b["dialogues"]) for b in service.bodies.get("/v1/contradiction", []))

    first_service = fake_service()
    first = run(first_service)
    assert sent(first_service) == 2 * len(DECODE)  # both modes
    again = fake_service()
    second = run(again)
    assert sent(again) == 0
    assert second.metrics == first.metrics and second.predictions == first.predictions
    assert second.report["resume"]["original"]["structured"] == {
        "dialogues_reused": len(DECODE), "dialogues_detected": 0, "rows_invalid": 0,
        "rows_stale": 0}
    assert second.report["models"] == first.report["models"]
    # Another threshold changes the answers: nothing stored under 0.5 is reused.
    other = fake_service()
    run(other, threshold=0.95)
    assert sent(other) == 2 * len(DECODE)
