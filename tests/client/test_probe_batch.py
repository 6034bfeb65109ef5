"""The CEDAR probes with their scoring done as a batch job: the requests written as batch lines,
the job's output read back; the report equals the HTTP run's. The job is stood in for by sending
each line to the contract fake (the real job against the real service:
tests/service/test_batch_service.py). Client-only."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx
import pytest

from contract_fake import ContractFake
from dialscore.batch_file import BatchAnswers, BatchOutputError, nll_custom_id
from dialscore.cli import main
from dialscore.client import DialscoreClient
from dialscore.probes import SAMPLE_DATA as SAMPLE
from dialscore.probes.data import dump_dialogues, load_dialogues
from dialscore.probes.run import run_probes, write_probe_batch

FAST = {"progress": False, "plots": False, "n_boot": 100}
MODELS = ["fake-gpt", "fake-bart"]


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    keep = [d for d in load_dialogues(SAMPLE) if d.id.endswith(("-01", "-05"))]
    path = tmp_path_factory.mktemp("data") / "small.jsonl"
    dump_dialogues(keep, path)
    return path


def run_job(server: ContractFake, requests: Path, output: Path, skip: int = 0) -> int:
    """Answer each request line as the job would (the output in reverse order: a job's order
    is not the input's); leave the last `skip` unanswered. Returns the lines answered."""
    lines = [json.loads(x) for x in requests.read_text().splitlines()]
    rows = []
    with httpx.Client(transport=server.transport(), base_url="http://fake") as http:
        for n, line in enumerate(lines[:len(lines) - skip], start=1):
            r = http.request(line["method"], line["url"], json=line["body"])
            rows.append({"id": f"batch-{n}", "custom_id": line["custom_id"], "line": n,
                         "response": {"status_code": r.status_code, "body": r.json()},
                         "error": None if r.status_code == 200 else {"code": "x", "message": ""}})
    output.write_text("".join(json.dumps(r) + "\n" for r in reversed(rows)))
    return len(rows)


def test_probe_scores_from_a_batch_job_equal_the_http_runs(data, tmp_path):
    server = ContractFake()
    with DialscoreClient("http://fake", transport=server.transport()) as client:
        http_report = run_probes(client, data, MODELS, seed=0, out_dir=tmp_path / "http", **FAST)
        sent_over_http = len(server.nll_items)
        counts = write_probe_batch(client, data, tmp_path / "requests.jsonl", MODELS, seed=0,
                                   out_dir=tmp_path / "batch", chunk_size=16)
        assert len(server.nll_items) == sent_over_http  # writing the file scores nothing
        assert counts["items"] == sent_over_http and counts["lines"] > 1
        run_job(server, tmp_path / "requests.jsonl", tmp_path / "results.jsonl")
        scored_by_job = len(server.nll_items)
        batch_report = run_probes(client, data, MODELS, seed=0, out_dir=tmp_path / "batch",
                                  chunk_size=16, batch_output=tmp_path / "results.jsonl", **FAST)
        assert len(server.nll_items) == scored_by_job  # the report came from the file
    assert batch_report.pairs == http_report.pairs and len(http_report.pairs) > 0
    http_rows = (tmp_path / "http" / "scores.jsonl").read_text().splitlines()
    batch_rows = (tmp_path / "batch" / "scores.jsonl").read_text().splitlines()
    assert sorted(map(json.loads, http_rows), key=lambda r: r["id"]) == sorted(
        map(json.loads, batch_rows), key=lambda r: r["id"])


def test_cli_round_trip_and_a_chunk_missing_from_the_output_is_named(data, tmp_path, capsys,
                                                                   monkeypatch):
    from dialscore.commands import service_args

    server = ContractFake()
    monkeypatch.setattr(service_args, "client_from_args",
                        lambda args: DialscoreClient("http://fake", transport=server.transport()))
    requests, results = tmp_path / "requests.jsonl", tmp_path / "results.jsonl"
    common = ["--url", "http://fake", "--data", str(data), "--models", ",".join(MODELS),
              "--out", str(tmp_path / "run"), "--chunk-size", "16", "--no-plots",
              "--no-progress", "--bootstrap", "50"]
    assert main(["probe", *common, "--as-batch", str(requests)]) == 0
    assert f"to {requests}" in capsys.readouterr().out
    run_job(server, requests, results, skip=1)
    assert main(["probe", *common, "--from-batch-output", str(results)]) == 1
    err = capsys.readouterr().err
    assert "BatchOutputError" in err and "has no line for nll-" in err
    run_job(server, requests, results)
    assert main(["probe", *common, "--from-batch-output", str(results)]) == 0
    assert (tmp_path / "run" / "report.json").is_file()


def test_an_error_line_is_not_taken_for_a_score(tmp_path):
    items = [{"context": ["hi"], "target": "there"}]
    line = {"custom_id": nll_custom_id("m", items, False), "line": 1,
            "response": {"status_code": 404, "body": {"error": {"type": "unknown_model"}}},
            "error": {"code": "unknown_model", "message": "unknown model 'm'"}}
    (tmp_path / "out.jsonl").write_text(json.dumps(line) + "\n" + '{"custom_id": "torn')
    answers = BatchAnswers(None, tmp_path / "out.jsonl")
    with pytest.raises(BatchOutputError, match="answered 404"):
        asyncio.run(answers.nll_many("m", items))
