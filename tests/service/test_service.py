"""The real Serve application on loopback, over real HTTP (session-scoped fixture `served`)."""

from __future__ import annotations

import asyncio
import re

import httpx
import pytest

from dialscore_server.nll.engine.encoding import NLLItem
from dialscore_server.nll.engine.engine import NLLEngine
from dialscore_server.nll.protocol import NLLResponse
from ray_metrics import replica_metrics, sample_sum
from serve_apps import ONE_THREAD, app_args, deploy_app, wait_until

pytestmark = pytest.mark.serve

RAGGED = [
    {"context": ["Hi! How was your weekend?", "Great, I found a buyer for the house."],
     "target": "That's wonderful, you must be so happy!"},
    {"context": [], "target": "Hello."},
    {"source": "a raw source text", "target": "x"},
    {"context": ["why are you so happy?"], "knowledge": "I found a buyer causes I am happy",
     "target": "because I sold the house 😀"},
    {"context": ["turn"] * 40, "target": "a longer target with several words in it, and punctuation."},
    {"context": ["Tu aimes le café ? ☕"], "target": "Oui, beaucoup — 日本語"},
]


def _engine_results(served, model: str, items: list[dict]):
    engine = NLLEngine(served.config(model), num_threads=1)
    return engine.score([NLLItem(target=i["target"], source=i.get("source"),
                                 context=tuple(i["context"]) if "context" in i else None,
                                 knowledge=i.get("knowledge")) for i in items])


@pytest.mark.parametrize("model", ["dialogpt-medium", "bart-base"])
def test_nll_over_http_equals_engine_and_keeps_order(served, model):
    items = RAGGED * 3
    r = httpx.post(f"{served.url}/v1/nll", json={"model": model, "items": items, "return_tokens": True},
                   timeout=60)
    assert r.status_code == 200, r.text
    body = NLLResponse.model_validate(r.json())
    assert body.stand_in is True and body.model == model and body.append_eos is True
    direct = _engine_results(served, model, items)
    assert len(body.results) == len(items)
    for got, want in zip(body.results, direct):
        assert got.nll == pytest.approx(want.nll, abs=1e-4)
        assert got.token_nlls == pytest.approx(want.token_nlls, abs=1e-4)
        assert got.num_tokens == want.num_tokens == len(got.tokens)
    # Order is kept: the items' NLLs differ, so a permutation would show.
    assert len({round(r.nll, 3) for r in body.results[:6]}) == 6
    assert body.usage.target_tokens == sum(x.num_tokens for x in direct)
    # Milliseconds as integers, as text-embeddings-inference sends them under the same names.
    assert int(r.headers["x-compute-time"]) >= 0 and int(r.headers["x-queue-time"]) >= 0


#: The model of the app `batching`, which only the tests reading its replica's metrics use (so no
#: other test's counts reach them).
BATCHED = "batching-gpt"


@pytest.fixture(scope="module")
def batching(served, stand_ins, sharp_stand_ins):
    args = app_args(stand_ins, models=[
        {"name": "dialogpt-medium", "serve_as": BATCHED,
         "overrides": {"source": str(sharp_stand_ins["gpt2"])},
         "serving": {**ONE_THREAD, "max_ongoing_requests": 64}}])
    with deploy_app(served, "batching", args) as app:
        yield app


BATCH_METRICS = ("ray_dialscore_batch_requests_count", "ray_dialscore_reused_tokens_total",
                 "ray_dialscore_items_scored_total")


def _batch_metrics() -> dict[str, float]:
    """The batching app's replica's batch figures, as its node's metrics agent exports them."""
    texts = replica_metrics()
    return {n: sample_sum(texts, n, application="batching", model=BATCHED) for n in BATCH_METRICS}


def _post_concurrently(app, bodies: list[dict]) -> tuple[list[httpx.Response], dict[str, float]]:
    """POST every body to the batching app's /v1/nll at once; the responses, and how much each
    replica metric grew meanwhile (once the items of every request reached the metrics)."""
    before = _batch_metrics()

    async def fire():
        async with httpx.AsyncClient(base_url=app.url, timeout=60) as client:
            return await asyncio.gather(*(client.post("/v1/nll", json=b) for b in bodies))

    responses = asyncio.run(fire())
    assert all(r.status_code == 200 for r in responses), [r.text for r in responses if r.status_code != 200]
    items = sum(len(b["items"]) for b in bodies)

    def grown():
        now = _batch_metrics()
        grew = {n: now[n] - before[n] for n in BATCH_METRICS}
        return grew if grew["ray_dialscore_items_scored_total"] >= items else None

    grew = wait_until(grown, "the replica's metrics reaching its node's agent")
    return responses, {n.removeprefix("ray_"): v for n, v in grew.items()}


def test_concurrent_requests_are_merged_into_batches(batching):
    requests = [{"model": BATCHED,
                 "items": [{"context": [f"turn {i}", "and another"], "target": f"reply number {i}"},
                           {"context": [], "target": f"{i} {i} {i}"}]} for i in range(32)]
    responses, grew = _post_concurrently(batching, requests)
    flat = [it for b in requests for it in b["items"]]
    direct = _engine_results(batching, BATCHED, flat)
    got = [res["nll"] for r in responses for res in r.json()["results"]]
    assert got == pytest.approx([d.nll for d in direct], abs=1e-4)
    # Every item counted once, in fewer engine calls than requests (Ray's exported histogram
    # sums are estimated from the buckets, so the calls are counted, not summed).
    assert grew["dialscore_items_scored_total"] == 64
    assert grew["dialscore_batch_requests_count"] < 32, "32 concurrent requests should share engine calls"


def test_replicas_take_the_machines_kernel_routes(served):
    """The NLL replicas choose their linear routes through this machine's route file (the
    session's DIALSCORE_CACHE_DIR, which Ray's workers inherit): each shape of their models at
    their thread count is recorded there once, with its timing and choice, for every later replica
    and benchmark to read."""
    from dialscore_server.nll.engine.kernel_choice import described
    from dialscore_server.nll.engine.kernels import onednn_linear_available

    if not onednn_linear_available():
        pytest.skip("this torch build has no oneDNN linear: no route is timed")
    routes = {k: v for k, v in described().items() if k.endswith(" threads=1")}
    assert routes, "no route recorded by a replica"
    assert all(re.fullmatch(r"\d+x\d+ float32 \[(in,out|out,in)\]( \+gelu)? rows=\d+ threads=1", k)
               for k in routes), routes
    assert all(re.fullmatch(r"[\d.]+ / [\d.]+ ms -> (oneDNN|PyTorch)", v) for v in routes.values()), routes
    assert any("+gelu" in k for k in routes)  # GPT-2's c_fc, timed with its GELU folded in


def test_prefix_reuse_spans_requests_merged_into_one_batch(batching):
    """Concurrent one-item requests whose contexts share a long prefix: only Serve's merging can
    put them in one engine call, and the engine then computes the shared prefix once (counted in
    dialscore_reused_tokens_total). The NLLs equal the engine's with reuse off."""
    history = ["we could go to the museum on saturday if the weather is bad",
               "or the park if it is sunny, the kids would like that a lot", "Why?"]
    items = [{"context": history, "target": f"because option {i} is what {i} people chose"}
             for i in range(24)]
    responses, grew = _post_concurrently(batching, [{"model": BATCHED, "items": [it]} for it in items])
    got = [r.json()["results"][0]["nll"] for r in responses]
    plain = NLLEngine(batching.config(BATCHED), num_threads=1, prefix_reuse=False)
    want = plain.score([NLLItem(context=tuple(it["context"]), target=it["target"]) for it in items])
    assert got == pytest.approx([w.nll for w in want], abs=1e-4)
    batches = grew["dialscore_batch_requests_count"]
    assert batches < len(items), "concurrent requests were never merged"
    # Every batch of k > 1 merged requests saves (k - 1) x the shared prefix (>= 16 tokens).
    assert grew["dialscore_reused_tokens_total"] >= 16 * (len(items) - batches), grew


CACHE_METRICS = {"hits": ("ray_dialscore_context_cache_lookups_total", {"result": "hit"}),
                 "tokens": ("ray_dialscore_context_cache_tokens_total", {}),
                 "items": ("ray_dialscore_items_scored_total", {})}


def _cache_metrics() -> dict[str, float]:
    texts = replica_metrics()
    return {k: sample_sum(texts, name, application="batching", model=BATCHED, **labels)
            for k, (name, labels) in CACHE_METRICS.items()}


def test_a_chat_session_reuses_its_context_across_requests(batching):
    """One request per bot turn, one after the other (so no two share an engine call): each turn's
    context is the last one plus two turns, and the replica's context cache serves the part it
    computed for the previous request (dialscore_context_cache_*). The NLLs are the engine's with
    no cache and no reuse at all."""
    turns = ["did you see the game last night, it went to extra time",
             "I did, the keeper saved two penalties in a row, unbelievable",
             "my brother was there, he said the noise was like nothing else",
             "lucky him, tickets sold out in about ten minutes this year",
             "he queued online from six in the morning to get them",
             "that is dedication, I would have given up after an hour",
             "he always says the same thing and then never gives up"]
    candidates = ["what a night", "so who won in the end?", "I missed it, sadly"]
    before = _cache_metrics()
    got, items = [], []
    for k in range(2, len(turns) + 1, 2):
        body = [{"context": turns[:k], "target": c} for c in candidates]
        r = httpx.post(f"{batching.url}/v1/nll", json={"model": BATCHED, "items": body}, timeout=60)
        assert r.status_code == 200, r.text
        got += [x["nll"] for x in r.json()["results"]]
        items += body
    plain = NLLEngine(batching.config(BATCHED), num_threads=1, prefix_reuse=False)
    want = plain.score([NLLItem(context=tuple(i["context"]), target=i["target"]) for i in items])
    assert got == pytest.approx([w.nll for w in want], abs=1e-4)

    def grown():
        now = _cache_metrics()
        grew = {k: now[k] - before[k] for k in now}
        return grew if grew["items"] >= len(items) else None

    grew = wait_until(grown, "the replica's metrics reaching its node's agent")
    requests = len(range(2, len(turns) + 1, 2))
    assert grew["hits"] >= requests - 1, grew  # every request after the first
    assert grew["tokens"] > 0, grew


OK_ITEM = {"context": ["hi"], "target": "hello"}
BAD_BODIES = [
    ("missing model", {"items": [OK_ITEM]}, 422, "model"),
    ("model not a string", {"model": 1, "items": [OK_ITEM]}, 422, "model"),
    ("nested junk", {"model": {"a": [[[[{}]]]]}, "items": [OK_ITEM]}, 422, "model"),
    ("items not a list", {"model": "dialogpt-medium", "items": "x"}, 422, "items"),
    ("no items", {"model": "dialogpt-medium", "items": []}, 422, "items"),
    ("neither context nor source", {"model": "dialogpt-medium", "items": [{"target": "x"}]}, 422, "items[0]"),
    ("both context and source", {"model": "dialogpt-medium",
                                 "items": [OK_ITEM, {"context": [], "source": "s", "target": "x"}]}, 422, "items[1]"),
    ("target a number", {"model": "dialogpt-medium", "items": [{"context": [], "target": 5}]}, 422, "items[0].target"),
    ("turn a number", {"model": "dialogpt-medium", "items": [{"context": ["a", 2], "target": "x"}]}, 422,
     "items[0].context[1]"),
    ("empty target", {"model": "dialogpt-medium", "items": [OK_ITEM, OK_ITEM, OK_ITEM, {"context": [], "target": ""}]},
     422, "items[3].target"),
    ("unknown field", {"model": "dialogpt-medium", "items": [OK_ITEM], "temperature": 1}, 422, "temperature"),
    ("return_tokens a string", {"model": "dialogpt-medium", "items": [OK_ITEM], "return_tokens": "yes"}, 422,
     "return_tokens"),
    ("unknown model", {"model": "gpt-5", "items": [OK_ITEM]}, 404, "model"),
    ("huge string", {"model": "dialogpt-medium", "items": [{"context": [], "target": "x" * 30_000}]}, 413,
     "items[0].target"),
    ("10,000 items", {"model": "dialogpt-medium", "items": [OK_ITEM] * 10_000}, 413, "items"),
    ("too many turns", {"model": "dialogpt-medium", "items": [{"context": ["t"] * 300, "target": "x"}]}, 413,
     "items[0].context"),
    ("target longer than the window", {"model": "dialogpt-medium",
                                       "items": [{"context": [], "target": "word " * 2000}]}, 422, "items[0].target"),
]


@pytest.mark.parametrize("name,body,status,param", BAD_BODIES, ids=[b[0] for b in BAD_BODIES])
def test_bad_bodies_get_their_documented_error(served, name, body, status, param):
    r = httpx.post(f"{served.url}/v1/nll", json=body, timeout=60)
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert error["param"] == param
    assert error["type"] == {422: "invalid_request", 404: "unknown_model", 413: "payload_too_large"}[status]
    assert error["message"]


RAW_BODIES = [
    ("invalid UTF-8", b'{"model": "dialogpt-medium", "items": [{"context": [], "target": "\xff\xfe"}]}', 422),
    ("not JSON", b"model=dialogpt-medium", 422),
    ("truncated JSON", b'{"model": "dialogpt-medium", "items": [', 422),
    ("top-level array", b"[1, 2, 3]", 422),
    ("lone surrogate", b'{"model": "dialogpt-medium", "items": [{"context": [], "target": "\\ud800"}]}', 422),
    ("NaN literal", b'{"model": NaN, "items": []}', 422),
    ("body over the byte limit", b'{"model": "' + b"x" * 8_100_000 + b'"}', 413),
]


@pytest.mark.parametrize("name,raw,status", RAW_BODIES, ids=[b[0] for b in RAW_BODIES])
def test_malformed_bytes_get_a_typed_error_never_a_500(served, name, raw, status):
    r = httpx.post(f"{served.url}/v1/nll", content=raw, headers={"content-type": "application/json"},
                   timeout=60)
    assert r.status_code == status, r.text
    assert r.json()["error"]["type"] in ("invalid_request", "payload_too_large")


def test_overload_sheds_with_503_and_retry_after(tiny_queue):
    """The `tiny-queue` deployment holds 1 request and queues 1: a burst must be shed, not hang."""
    served = tiny_queue
    body = {"model": "tiny-queue", "items": [{"context": ["a long context " * 20], "target": "t " * 50}] * 64}

    async def burst():
        async with httpx.AsyncClient(base_url=served.url, timeout=60) as client:
            return await asyncio.gather(*(client.post("/v1/nll", json=body) for _ in range(12)))

    responses = asyncio.run(burst())
    statuses = [r.status_code for r in responses]
    assert 503 in statuses and 200 in statuses, statuses
    assert set(statuses) <= {200, 503}
    shed = next(r for r in responses if r.status_code == 503)
    assert shed.json()["error"]["type"] == "overloaded"
    assert int(shed.headers["Retry-After"]) >= 1
    # ...and it recovers by itself.
    assert httpx.post(f"{served.url}/v1/nll", json=body, timeout=60).status_code == 200


def test_health_models_metrics_and_docs(served):
    assert httpx.get(f"{served.url}/healthz").json() == {"status": "ok"}
    ready = httpx.get(f"{served.url}/readyz", timeout=30)
    assert ready.status_code == 200 and ready.json()["ready"] is True
    models = {m["name"]: m for m in httpx.get(f"{served.url}/v1/models", timeout=30).json()["models"]}
    assert set(models) == {"dialogpt-medium", "bart-base", "untrained-gpt2", "roberta-large-mnli"}
    assert models["roberta-large-mnli"]["family"] == "classifier"
    assert models["bart-base"]["family"] == "seq2seq" and models["dialogpt-medium"]["stand_in"] is True
    for key in ("name", "family", "source", "revision", "max_length", "dtype", "device", "stand_in"):
        assert key in models["dialogpt-medium"]
    text = httpx.get(f"{served.url}/metrics").text
    assert "dialscore_requests_total" in text and "dialscore_request_latency_seconds_bucket" in text
    assert 'dialscore_requests_total{endpoint="/v1/nll"' in text
    assert httpx.get(f"{served.url}/docs").status_code == 200
    spec = httpx.get(f"{served.url}/openapi.json").json()
    documented = spec["paths"]["/v1/nll"]["post"]["responses"]
    assert {"404", "408", "413", "422", "424", "503"} <= set(documented)
    missing = httpx.get(f"{served.url}/no/such/route")
    assert missing.status_code == 404 and missing.json()["error"]["type"] == "not_found"
