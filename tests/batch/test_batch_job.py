"""A batch job over the fake engines, in this process (the inline executor: the Ray Data path is
tested against the live service in tests/service/test_batch_service.py): bad lines answered as
the service answers them, without stopping the job; the summary and the progress bar."""

from __future__ import annotations

import json

import pytest

import httpx

from batch_kit import fake_api, job_models, nll_line, read_output, write_lines
from dialscore_server.batch.executors import InlineExecutor
from dialscore_server.batch.job import run_job

GOOD = [nll_line("good-1", ["hello there", "hi"], "how are you"),
        nll_line("good-2", ["hello there", "hi"], "fine thanks"),
        {"custom_id": "det", "method": "POST", "url": "/v1/contradiction",
         "body": {"dialogues": [{"turns": [{"speaker": 1, "text": "I have a cat."},
                                            {"speaker": 1, "text": "I do not have a cat."}]}]}},
        {"custom_id": "rr", "method": "POST", "url": "/v1/rerank",
         "body": {"model": "fake-nli", "nll_model": "fake-gpt",
                  "context": [{"speaker": 1, "text": "I have a cat."}],
                  "candidates": ["I have no cat.", "My cat is black."]}}]

#: Lines the service's own routes refuse: (line, the status the service answers).
ROUTE_ERRORS = [
    ({"custom_id": "unknown-url", "method": "POST", "url": "/v1/nope", "body": {}}, 404),
    ({"custom_id": "get", "method": "GET", "url": "/v1/nll", "body": {}}, 405),
    ({"custom_id": "schema", "method": "POST", "url": "/v1/nll",
      "body": {"model": "fake-gpt", "items": [{"context": ["x"]}]}}, 422),
    ({"custom_id": "extra", "method": "POST", "url": "/v1/nll",
      "body": {"model": "fake-gpt", "items": [{"target": "x"}], "colour": "red"}}, 422),
    (nll_line("model", ["x"], "y", model="no-such-model"), 404),
]


@pytest.fixture(scope="module")
def models():
    return job_models()


def test_bad_lines_get_the_services_error_and_the_job_goes_on(models, tmp_path):
    lines = [GOOD[0], "not json", *[x for x, _ in ROUTE_ERRORS], GOOD[1],
             {"custom_id": "good-1", "method": "POST", "url": "/v1/nll", "body": {}}, *GOOD[2:]]
    src = write_lines(tmp_path / "in.jsonl", lines)
    summary = run_job(src, tmp_path / "out.jsonl", InlineExecutor(models, batch_size=3),
                      progress=False)
    out = {(r["custom_id"], r["line"]): r for r in read_output(tmp_path / "out.jsonl")}
    assert len(out) == len(lines)
    assert (summary.total, summary.done, summary.failed, summary.resumed) == (
        len(lines), len(GOOD), len(lines) - len(GOOD), 0)

    api = fake_api(models)

    with httpx.Client(transport=api.transport(), base_url="http://fake") as http:
        def service(line: dict) -> tuple[int, dict]:
            r = http.request(line["method"], line["url"], json=line["body"])
            return r.status_code, r.json()

        for number, line in enumerate(lines, start=1):
            if isinstance(line, str) or (line["custom_id"], number) not in out:
                continue
            got = out[(line["custom_id"], number)]
            if number == 9:  # the duplicate custom_id: refused before any route
                assert got["response"]["status_code"] == 422
                assert got["response"]["body"]["error"]["param"] == "custom_id"
                continue
            status, body = service(line)
            assert got["response"]["status_code"] == status, line
            if line["url"] != "/v1/rerank" or status != 200:
                assert got["response"]["body"] == body, line
            else:  # a rerank answer has a fresh id; its ranking and scores are the service's
                assert got["response"]["body"]["results"] == body["results"]
            assert (got["error"] is None) == (status == 200)
            if status != 200:
                assert got["error"]["code"] == body["error"]["type"]
    for line, status in ROUTE_ERRORS:
        (got,) = [r for (cid, _), r in out.items() if cid == line["custom_id"]]
        assert got["response"]["status_code"] == status
    (torn,) = [r for (cid, n), r in out.items() if n == 2]
    assert torn["custom_id"] is None and torn["error"]["code"] == "invalid_request"


def test_progress_bar_and_summary(models, tmp_path, capsys):
    src = write_lines(tmp_path / "in.jsonl", GOOD[:2] + ["{"])
    summary = run_job(src, tmp_path / "out.jsonl", InlineExecutor(models), progress=True)
    err = capsys.readouterr().err
    assert "batch" in err and "3/3" in err  # tqdm's bar, counted to the last line
    assert (summary.done, summary.failed) == (2, 1)
    assert summary.items_per_s > 0 and "2 done, 1 failed" in summary.line()
    assert json.loads(json.dumps(summary.to_dict()))["items_per_s"] >= 0
