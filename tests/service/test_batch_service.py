"""The same request file through the live service (HTTP, one request at a time) and as a
`dialscore batch` job: the same answers, error bodies identical.

* On Ray Data, on the session's own Ray cluster (``--address``), one request per block, no two
  requests sharing a context (so no context cache serves one side and not the other): each
  engine call computes what the service's did for that request, so numbers are equal to 1e-6;
  the job uses only the CPUs it is given and leaves the Serve application's replicas as they were.
* In-process, eight requests per block: requests sharing a context share engine calls (their
  prefix computed once), so numbers agree to the engine's prefix-reuse tolerance, 1e-4
  (tests/engines/test_prefix_reuse.py): float32 sums taken in another order.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

pytestmark = [pytest.mark.serve, pytest.mark.slow]

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "batch"))
from batch_kit import read_output, run_batch_command, write_lines  # noqa: E402
from serve_apps import running_replicas  # noqa: E402

CONTEXTS = [["Hello, how are you?", "Fine, thanks. And you?"], ["Where do you live?"]]
TARGETS = ["I am well.", "Not bad at all.", "In a small town by the sea."]
DIALOGUE = [{"speaker": 1, "text": "I have two cats."}, {"speaker": 2, "text": "Nice!"},
            {"speaker": 1, "text": "I have never had a pet."}]


#: Words that open a context with a token no other context of the file opens with.
OPENERS = ["Apples.", "Bread.", "Cheese.", "Dates.", "Eggs.", "Figs."]


def request_lines(unique_contexts: bool = False) -> list[dict[str, Any]]:
    """The request file. With `unique_contexts`, no two /v1/nll lines share a context: each is
    opened by its own word, so neither the service's context cache nor the job's can hold a
    line's context from another line, and both compute every context afresh whatever the
    order in which they meet the lines (the cache's own bound against a fresh computation is
    1e-5, wider than the 1e-6 the Ray Data test holds the job to)."""
    lines = []
    for model in ("dialogpt-medium", "bart-base"):
        for c, context in enumerate(CONTEXTS):
            for t, target in enumerate(TARGETS):
                if unique_contexts:
                    context = [f"{OPENERS[c * len(TARGETS) + t]} {context[0]}", *context[1:]]
                lines.append({"custom_id": f"nll-{model}-{c}-{t}", "method": "POST",
                              "url": "/v1/nll", "body": {
                                  "model": model, "return_tokens": True,
                                  "items": [{"context": context, "target": target}]}})
    lines += [
        {"custom_id": "cmpl", "method": "POST", "url": "/v1/completions",
         "body": {"model": "dialogpt-medium", "prompt": ["Hello there, how are you?", "Fine."],
                  "max_tokens": 0, "echo": True, "logprobs": 1}},
        {"custom_id": "det", "method": "POST", "url": "/v1/contradiction",
         "body": {"dialogues": [{"turns": DIALOGUE}]}},
        {"custom_id": "rr", "method": "POST", "url": "/v1/rerank",
         "body": {"nll_model": "dialogpt-medium", "context": DIALOGUE[:2],
                  "candidates": ["I love my cats.", "I never had a cat."]}},
        {"custom_id": "bad-model", "method": "POST", "url": "/v1/nll",
         "body": {"model": "nope", "items": [{"context": ["Hi."], "target": "Hello."}]}},
        {"custom_id": "bad-schema", "method": "POST", "url": "/v1/contradiction",
         "body": {"dialogues": [{"turns": [{"text": "no speaker"}]}]}},
    ]
    return lines


def differences(a: Any, b: Any, tol: float, path: str = "") -> list[str]:
    """Where JSON `a` and `b` differ, floats beyond `tol` (each as ``path: a != b``); a
    response's fresh `id` and `created` left out."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = [f"{path}.{k}: missing on one side" for k in sorted(set(a) ^ set(b))]
        for k in sorted((set(a) & set(b)) - {"id", "created"}):
            out += differences(a[k], b[k], tol, f"{path}.{k}")
        return out
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{path}: {len(a)} != {len(b)} elements"]
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in differences(x, y, tol, f"{path}[{i}]")]
    if isinstance(a, float) or isinstance(b, float):
        close = (isinstance(a, (int, float)) and isinstance(b, (int, float))
                 and math.isclose(a, b, rel_tol=0, abs_tol=tol))
        return [] if close else [f"{path}: {a!r} != {b!r}"]
    return [] if a == b else [f"{path}: {a!r} != {b!r}"]


def answered(served, root: Path, lines: list[dict[str, Any]]):
    """The request file of `lines`, a Serve config of the served app's models, and the service's
    answers, asked one at a time in file order."""
    src = write_lines(root / "in.jsonl", lines)
    config = root / "app.yaml"
    config.write_text(yaml.safe_dump({"applications": [
        {"name": "batch", "import_path": "x:y", "args": served.args.model_dump(mode="json")}]}))
    with httpx.Client(base_url=served.url, timeout=120) as http:
        expected = {x["custom_id"]: http.post(x["url"], json=x["body"]) for x in lines}
    assert expected["bad-model"].status_code == 404 and expected["cmpl"].status_code == 200
    return src, config, expected


@pytest.fixture(scope="module")
def job_input(served, tmp_path_factory):
    """:func:`answered` for the request file whose lines share contexts."""
    return answered(served, tmp_path_factory.mktemp("batch-service"), request_lines())


@pytest.fixture(scope="module")
def fresh_job_input(served, tmp_path_factory):
    """:func:`answered` for the request file whose /v1/nll lines share no context."""
    return answered(served, tmp_path_factory.mktemp("batch-service-fresh"),
                    request_lines(unique_contexts=True))


def check_output(out: Path, summary: Path, expected: dict[str, httpx.Response], tol: float) -> None:
    got = {r["custom_id"]: r for r in read_output(out)}
    assert sorted(got) == sorted(expected)
    differ = []
    for custom_id, response in expected.items():
        line = got[custom_id]
        assert line["response"]["status_code"] == response.status_code, custom_id
        differ += differences(line["response"]["body"], response.json(), tol, custom_id)
    assert not differ, f"{len(differ)} values differ beyond {tol} (job != service):\n" + "\n".join(differ[:40])
    counts = json.loads(summary.read_text())
    assert (counts["done"], counts["failed"]) == (len(expected) - 2, 2)


def test_batch_job_on_ray_data_answers_as_the_service(fresh_job_input, tmp_path):
    """Every line to 1e-6. The lines share no context (see :func:`request_lines`): Ray Data
    does not keep block order, so with shared contexts the job could meet a line's context in
    its cache where the service computed it afresh, or the other way round."""
    import ray

    src, config, expected = fresh_job_input
    replicas = running_replicas()
    done = run_batch_command(
        ["-i", str(src), "-o", str(tmp_path / "out.jsonl"), "--config", str(config),
         "--address", ray.get_runtime_context().gcs_address, "--concurrency", "1",
         "--num-cpus", "0.2", "--batch-size", "1", "--no-progress",
         "--summary-json", str(tmp_path / "s.json")])
    assert done.returncode == 0, done.stderr[-3000:]
    assert running_replicas() == replicas  # the job started and stopped only its own actors
    check_output(tmp_path / "out.jsonl", tmp_path / "s.json", expected, tol=1e-6)


def test_merged_blocks_agree_with_the_service_to_the_prefix_reuse_tolerance(job_input, tmp_path):
    src, config, expected = job_input
    done = run_batch_command(
        ["-i", str(src), "-o", str(tmp_path / "out.jsonl"), "--config", str(config),
         "--executor", "inline", "--batch-size", "8", "--no-progress",
         "--summary-json", str(tmp_path / "s.json")])
    assert done.returncode == 0, done.stderr[-3000:]
    check_output(tmp_path / "out.jsonl", tmp_path / "s.json", expected, tol=1e-4)


def test_a_cedar_sweep_as_a_batch_job_scores_as_the_http_probe_run(served, job_input, tmp_path):
    """`dialscore probe --as-batch`, the job on Ray Data, `--from-batch-output`: the same pairs
    and, to the prefix-reuse tolerance, the same NLLs as the probe run over HTTP."""
    import ray

    from dialscore.client import DialscoreClient
    from dialscore.probes import SAMPLE_DATA
    from dialscore.probes.data import dump_dialogues, load_dialogues
    from dialscore.probes.run import run_probes, write_probe_batch

    _, config, _ = job_input
    data = tmp_path / "data.jsonl"
    dump_dialogues([d for d in load_dialogues(SAMPLE_DATA) if d.id.endswith("-01")], data)
    fast = {"progress": False, "plots": False, "n_boot": 50}
    models = ["dialogpt-medium", "bart-base"]
    with DialscoreClient(served.url, timeout=120) as client:
        http = run_probes(client, data, models, out_dir=tmp_path / "http", **fast)
        counts = write_probe_batch(client, data, tmp_path / "req.jsonl", models,
                                   out_dir=tmp_path / "job", chunk_size=16)
        done = run_batch_command(
            ["-i", str(tmp_path / "req.jsonl"), "-o", str(tmp_path / "out.jsonl"),
             "--config", str(config), "--address", ray.get_runtime_context().gcs_address,
             "--num-cpus", "0.2", "--batch-size", "4", "--no-progress"])
        assert done.returncode == 0, done.stderr[-3000:]
        job = run_probes(client, data, models, out_dir=tmp_path / "job", chunk_size=16,
                         batch_output=tmp_path / "out.jsonl", **fast)
    assert counts["items"] > 0 and len(job.pairs) == len(http.pairs) > 0
    for a, b in zip(job.pairs, http.pairs):
        assert (a.pair_id, a.valid_item, a.corrupted_item) == (b.pair_id, b.valid_item, b.corrupted_item)
        assert a.nll_valid == pytest.approx(b.nll_valid, abs=1e-4)
        assert a.nll_corrupted == pytest.approx(b.nll_corrupted, abs=1e-4)
