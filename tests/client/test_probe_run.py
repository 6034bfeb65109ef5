"""The probe runner end to end against the contract fake (tests/client/contract_fake.py): items,
outputs, orientation of the comparison, resume, the sync entry point's transport, the CLI."""

from __future__ import annotations

import asyncio
import csv
import json
import threading
from pathlib import Path

import httpx
import pytest

from dialscore.cli import main
from dialscore.client import AsyncDialscoreClient, DialscoreClient, RetryPolicy
from dialscore.errors import OverloadedError
from dialscore.probes.data import Dialogue, dump_dialogues, load_dialogues
from dialscore.probes.plan import plan_probes
from dialscore.probes.run import arun_probes, run_probes
from contract_fake import FAKE_CARDS, ContractFake

from dialscore.probes import SAMPLE_DATA as SAMPLE
FAST = {"progress": False, "plots": False, "n_boot": 100}


@pytest.fixture(scope="module")
def small_data(tmp_path_factory) -> Path:
    """Two dialogues of each dataset, one of them without an invalid explanation."""
    dialogues = load_dialogues(SAMPLE)
    keep = [d for d in dialogues if d.id.endswith(("-01", "-05"))]
    path = tmp_path_factory.mktemp("data") / "small.jsonl"
    dump_dialogues(keep, path)
    return path


def client_for(server: ContractFake, **kw) -> DialscoreClient:
    return DialscoreClient("http://fake", transport=server.transport(), **kw)


def valid_texts(path: Path) -> set[str]:
    return {e.text for d in load_dialogues(path) for e in d.explanations if e.valid}


def test_items_follow_each_models_format_and_are_deduplicated():
    d = Dialogue.model_validate({
        "id": "x", "dataset": "MuTual", "history": ["Is the shop open?", "Until six."],
        "response": "Then I'll hurry.", "explanations": [
            {"dimension": "event", "antecedent": "The shop closing soon", "connective": "causes",
             "consequent": "the speaker hurries", "valid": True},
            {"dimension": "emotion", "antecedent": "Rain", "connective": "enables",
             "consequent": "joy", "valid": False}]})
    infos = FAKE_CARDS[:2]
    plan = plan_probes([d], infos, ["inference", "attribution"], seed=0)
    valid = "The shop closing soon causes the speaker hurries"
    assert len(plan.pairs) == 2 * 2 * 6
    # Per model and setting: one valid item shared by the six corruptions, six corrupted ones.
    assert len(plan.items) == 2 * 2 * 7 and plan.n_item_refs == 2 * 2 * 12
    items = {(i.model, i.setting, i.knowledge, i.target): i for i in plan.items.values()}
    inf = items[("fake-gpt", "inference", valid, "Then I'll hurry.")]
    assert inf.payload() == {"context": ["Is the shop open?", "Until six."], "knowledge": valid,
                             "target": "Then I'll hurry."}
    att = items[("fake-gpt", "attribution", None, valid)]
    assert att.payload() == {"context": ["Is the shop open?", "Until six.", "Then I'll hurry.",
                                         "Why is that?"], "target": valid}
    att_bart = items[("fake-bart", "attribution", None, valid)]
    assert att_bart.context[-1] == "Why?"                 # no format reported: the default
    negated = [p for p in plan.pairs if p.pair.corruption == "negation" and p.setting == "attribution"]
    assert plan.items[negated[0].corrupted_id].target == (
        "The shop closing soon does not cause the speaker hurries")
    incorrect = [p for p in plan.pairs if p.pair.corruption == "incorrect" and p.setting == "inference"]
    assert plan.items[incorrect[0].corrupted_id].knowledge == "Rain enables joy"


def test_run_writes_every_output_with_provenance(small_data, tmp_path):
    server = ContractFake()
    out = tmp_path / "run"
    with client_for(server) as client:
        report = run_probes(client, small_data, ["fake-gpt", "fake-bart"], ["inference", "attribution"],
                            seed=5, out_dir=out, chunk_size=16, n_boot=100, progress=False)
    names = {p.name for p in out.iterdir()}
    assert {"scores.jsonl", "pairs.csv", "pairs.jsonl", "summary.csv", "report.json", "tables.txt",
            "corruptions.png", "models.png"} <= names
    assert (out / "corruptions.png").read_bytes()[:4] == b"\x89PNG"
    assert server.max_request_items <= 16
    # Deduplicated: every distinct item was sent exactly once.
    sent = [json.dumps([m, i], sort_keys=True) for m, i in server.nll_items]
    assert len(sent) == len(set(sent)) == report.config["items"] < report.config["items_before_dedup"]

    rows = list(csv.DictReader(open(out / "pairs.csv", encoding="utf-8")))
    assert len(rows) == len(report.pairs) == report.config["pairs"]
    assert len({r["pair_id"] for r in rows}) == len(rows)
    # Any figure can be recomputed from the per-pair rows.
    att = [r for r in rows if r["model"] == "fake-gpt" and r["setting"] == "attribution"
           and r["category"] == "complete"]
    acc = sum(float(r["nll_valid"]) < float(r["nll_corrupted"]) for r in att) / len(att)
    assert report.metrics("fake-gpt", "attribution", category="complete").accuracy == pytest.approx(acc)

    saved = json.loads((out / "report.json").read_text())
    gpt = saved["models"]["fake-gpt"]
    assert (gpt["source"], gpt["revision"], gpt["stand_in"]) == ("fake/gpt", "0123abcd", True)
    assert gpt["format_choices"] == {"explanation_placement": "before_history",
                                     "why_turn": "Why is that?", "reported_by_server": True}
    assert saved["models"]["fake-bart"]["format_choices"]["reported_by_server"] is False
    assert saved["skipped"] == [{"corruption": "incorrect",
                                 "reason": "no invalid explanation in the dialogue", "count": 20}]
    assert saved["config"]["seed"] == 5 and saved["config"]["data_sha256"]
    assert len(saved["groups"]) == len(report.groups)
    tables = (out / "tables.txt").read_text()
    assert "STAND-IN" in tables and "fake-gpt" in tables and "'Why is that?'" in tables


def test_comparison_orientation_with_a_model_that_knows_the_valid_explanations(small_data, tmp_path):
    good = valid_texts(small_data)

    def knows(model, item):
        explanation = item.get("knowledge") or item["target"]
        return 1.0 if explanation in good else 3.0

    with client_for(ContractFake(scorer=knows)) as client:
        report = run_probes(client, small_data, "fake-gpt", "inference,attribution", 0,
                            tmp_path / "knows", **FAST)
    for g in report.groups:
        assert g.accuracy == 1.0 and g.mean_delta == 2.0, g

    with client_for(ContractFake(scorer=lambda m, i: 2.0)) as client:
        report = run_probes(client, small_data, "fake-gpt", "attribution", 0, tmp_path / "flat", **FAST)
    for g in report.groups:                                   # ties are misses
        assert g.accuracy == 0.0 and g.mean_delta == 0.0 and g.ties == g.n


def test_rerun_sends_no_new_scoring_requests(small_data, tmp_path):
    first_server, again = ContractFake(), ContractFake()
    with client_for(first_server) as client:
        first = run_probes(client, small_data, None, seed=1, out_dir=tmp_path, **FAST)
    with client_for(again) as client:
        second = run_probes(client, small_data, None, seed=1, out_dir=tmp_path, **FAST)
    assert first_server.nll_requests > 0 and again.nll_requests == 0
    assert "/v1/models" in again.paths
    assert second.pairs == first.pairs and second.config["items_reused"] == first.config["items"]
    assert {p.model for p in first.pairs} == {"fake-gpt", "fake-bart"}     # classifier left out


def test_a_run_that_dies_halfway_resumes(small_data, tmp_path):
    reference_server = ContractFake()
    with client_for(reference_server) as client:
        reference = run_probes(client, small_data, "fake-gpt", seed=2, out_dir=tmp_path / "ref", **FAST)
    total = reference.config["items"]

    dying = ContractFake(fail_after=3)
    with client_for(dying, max_concurrency=1, retry=RetryPolicy(max_attempts=2)) as client:
        with pytest.raises(OverloadedError):
            run_probes(client, small_data, "fake-gpt", seed=2, out_dir=tmp_path / "run",
                       chunk_size=16, **FAST)
    scores = tmp_path / "run" / "scores.jsonl"
    assert len(scores.read_text().splitlines()) == 48
    with open(scores, "a") as fh:                 # a crash in the middle of a write
        fh.write('{"id": "abc", "nll": 1.')

    healthy = ContractFake()
    with client_for(healthy) as client:
        resumed = run_probes(client, small_data, "fake-gpt", seed=2, out_dir=tmp_path / "run",
                             chunk_size=16, **FAST)
    assert len(healthy.nll_items) == total - 48
    assert resumed.config["torn_score_lines_ignored"] == 1
    assert resumed.pairs == reference.pairs
    # The torn line did not swallow the rows appended after it.
    with client_for(ContractFake()) as client:
        third = run_probes(client, small_data, "fake-gpt", seed=2, out_dir=tmp_path / "run", **FAST)
    assert third.config["items_scored_now"] == 0


def test_rows_that_parse_but_are_invalid_are_scored_again(small_data, tmp_path):
    """A stored row with "nll": null (or a non-number, or no tokens) is not a score: resume sends
    its item again and the report is built from the fresh score."""
    with client_for(ContractFake()) as client:
        first = run_probes(client, small_data, "fake-gpt", seed=3, out_dir=tmp_path, **FAST)
    scores = tmp_path / "scores.jsonl"
    rows = [json.loads(line) for line in scores.read_text().splitlines()]
    rows[0]["nll"] = None
    rows[1]["nll"] = "1.5"
    rows[2]["num_tokens"] = 0
    scores.write_text("".join(json.dumps(r) + "\n" for r in rows))
    server = ContractFake()
    with client_for(server) as client:
        again = run_probes(client, small_data, "fake-gpt", seed=3, out_dir=tmp_path, **FAST)
    assert len(server.nll_items) == 3
    assert again.config["torn_score_lines_ignored"] == 3
    assert again.pairs == first.pairs


def test_a_run_folder_is_locked_against_a_second_run(small_data, tmp_path):
    from dialscore.reporting.run_lock import RunFolderInUse, RunLock

    with RunLock(tmp_path):  # another run holds the folder
        with client_for(ContractFake()) as client, pytest.raises(RunFolderInUse, match="in use by another run"):
            run_probes(client, small_data, "fake-gpt", seed=3, out_dir=tmp_path, **FAST)
    with client_for(ContractFake()) as client:  # released: the next run goes ahead, and releases it
        run_probes(client, small_data, "fake-gpt", seed=3, out_dir=tmp_path, **FAST)
        run_probes(client, small_data, "fake-gpt", seed=3, out_dir=tmp_path, **FAST)


def test_writers_leave_a_live_processs_temporary_files_alone(tmp_path):
    """write_outputs (through atomic writes) removes temporaries of dead writers only."""
    import os
    import subprocess
    import sys

    from dialscore.reporting.atomic import atomic_write_text

    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        theirs = tmp_path / f".report.json.{live.pid}.abc.tmp"
        theirs.write_text("half")
        dead = tmp_path / ".report.json.999999999.def.tmp"
        dead.write_text("stale")
        legacy = tmp_path / ".report.json.xyz.tmp"
        legacy.write_text("stale")
        atomic_write_text(tmp_path / "report.json", "{}")
        assert theirs.exists() and not dead.exists() and not legacy.exists()
        assert (tmp_path / "report.json").read_text() == "{}"
        assert not [p for p in tmp_path.iterdir() if str(os.getpid()) in p.name]
    finally:
        live.kill()
        live.wait()


def test_a_changed_model_revision_is_scored_afresh(small_data, tmp_path):
    with client_for(ContractFake()) as client:
        run_probes(client, small_data, "fake-gpt", "attribution", 0, tmp_path, **FAST)
    newer = [FAKE_CARDS[0].model_copy(update={"revision": "fedcba98"})] + FAKE_CARDS[1:]
    server = ContractFake(newer)
    with client_for(server) as client:
        report = run_probes(client, small_data, "fake-gpt", "attribution", 0, tmp_path, **FAST)
    assert len(server.nll_items) == report.config["items"]
    assert report.models["fake-gpt"]["revision"] == "fedcba98"


def test_bad_model_names_are_refused_before_scoring(small_data, tmp_path):
    server = ContractFake()
    with client_for(server) as client:
        with pytest.raises(ValueError, match="did you mean 'fake-gpt'"):
            run_probes(client, small_data, "fake-gtp", out_dir=tmp_path, **FAST)
        with pytest.raises(ValueError, match="classifier"):
            run_probes(client, small_data, "fake-nli", out_dir=tmp_path, **FAST)
        with pytest.raises(ValueError, match="unknown setting"):
            run_probes(client, small_data, "fake-gpt", "explanation", out_dir=tmp_path, **FAST)
    assert server.nll_requests == 0


def test_async_runner_matches_sync_runner(small_data, tmp_path):
    with client_for(ContractFake()) as client:
        sync = run_probes(client, small_data, "fake-bart", seed=4, out_dir=tmp_path / "s", **FAST)

    async def go():
        async with AsyncDialscoreClient("http://fake", transport=ContractFake().transport(),
                                        max_concurrency=3) as client:
            return await arun_probes(client, small_data, "fake-bart", seed=4, out_dir=tmp_path / "a",
                                     chunk_size=7, **FAST)

    assert asyncio.run(go()).pairs == sync.pairs


class SyncOnly(httpx.BaseTransport):
    """A transport that serves sync clients only (as an ``httpx.HTTPTransport`` does)."""

    def __init__(self, inner: httpx.BaseTransport):
        self.inner = inner
        self.threads: set[str] = set()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.threads.add(threading.current_thread().name)
        return self.inner.handle_request(request)


def test_run_probes_sends_through_the_sync_clients_own_transport(small_data, tmp_path):
    """run_probes runs the async runner; the sync client's transport still carries every request,
    a sync-only one from worker threads."""
    server = ContractFake()
    transport = SyncOnly(server.transport())
    with DialscoreClient("http://fake", transport=transport) as client:
        report = run_probes(client, small_data, "fake-gpt", "attribution", 0, tmp_path, **FAST)
    assert len(server.nll_items) == report.config["items"] > 0
    assert "/v1/models" in server.paths and threading.main_thread().name not in transport.threads


# ------------------------------------------------------------------- CLI

@pytest.fixture
def fake_cli(monkeypatch):
    from dialscore.commands import service_args

    server = ContractFake()

    def factory(args):
        assert args.url == "http://fake"
        return client_for(server, max_concurrency=args.concurrency)

    monkeypatch.setattr(service_args, "client_from_args", factory)
    return server


def test_cli_probe_and_models(fake_cli, small_data, tmp_path, capsys):
    out = tmp_path / "cli"
    argv = ["probe", "--url", "http://fake", "--data", str(small_data), "--models", "fake-gpt",
            "--settings", "inference,attribution", "--seed", "3", "--out", str(out),
            "--no-plots", "--no-progress", "--bootstrap", "100"]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "Inference probing" in printed and "Attribution probing" in printed and "fake-gpt" in printed
    assert (out / "pairs.csv").exists() and (out / "report.json").exists()
    sent = fake_cli.nll_requests
    assert main(argv) == 0 and fake_cli.nll_requests == sent        # resumed: nothing new

    assert main(["models", "--url", "http://fake"]) == 0
    listing = capsys.readouterr().out
    assert "fake-gpt" in listing and "'Why is that?'" in listing and "(not reported)" in listing
    assert main(["models", "--url", "http://fake", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["name"] == "fake-gpt"


def test_cli_reports_bad_data_with_lines(fake_cli, tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "a"}\nnot json\n')
    assert main(["probe", "--url", "http://fake", "--data", str(bad), "--out", str(tmp_path / "o"),
                 "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "line 1: dataset: Field required" in err and "line 2: <line>: not valid JSON" in err
    assert fake_cli.nll_requests == 0
