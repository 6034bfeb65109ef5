"""The HTTP client against httpx.MockTransport: typed results, error mapping, retries, chunking."""

from __future__ import annotations

import asyncio
import email.utils
import json
import threading
import time

import httpx
import pytest

from dialscore import errors
from dialscore.batching import plan_chunks
from dialscore.client import AsyncDialscoreClient, DialscoreClient, RetryPolicy
from dialscore.retry_policy import parse_retry_after
from dialscore.retry_budget import RetryBudget
from dialscore.types import NLLItem, Turn
from contract_fake import ContractFake, error


def ok_nll(items: list[dict], nll=lambda i, item: 1.0) -> httpx.Response:
    return httpx.Response(200, json={
        "model": "m", "source": "s", "revision": "r", "stand_in": True, "append_eos": True,
        "results": [{"nll": nll(i, it), "num_tokens": 3, "truncated": False} for i, it in enumerate(items)],
        "usage": {"source_tokens": 1, "target_tokens": 1}})


class Script:
    """A handler that answers with a scripted sequence (the last entry repeats)."""

    def __init__(self, *steps):
        self.steps = list(steps)
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        step = self.steps[min(len(self.requests) - 1, len(self.steps) - 1)]
        if isinstance(step, Exception):
            raise step
        if callable(step):
            return step(request)
        return step


def nll_ok(request: httpx.Request) -> httpx.Response:
    return ok_nll(json.loads(request.content)["items"])


def sync_client(handler, **kw) -> tuple[DialscoreClient, list[float]]:
    client = DialscoreClient("http://test", transport=httpx.MockTransport(handler), **kw)
    slept: list[float] = []
    client._sleep = slept.append
    return client, slept


ITEMS = [{"context": ["Hi"], "target": "Hello"}]


# ------------------------------------------------------------------- typed results & requests

def test_models_parses_provenance_and_optional_format():
    client, _ = (DialscoreClient("http://test", transport=ContractFake().transport()), [])
    models = {m.name: m for m in client.models()}
    assert models["fake-gpt"].format.why_turn == "Why is that?"
    assert models["fake-gpt"].revision == "0123abcd" and models["fake-gpt"].stand_in
    assert models["fake-bart"].format is None           # optional; extra fields ignored
    assert models["fake-nli"].family == "classifier"


def test_nll_request_body_headers_and_result():
    handler = Script(nll_ok)
    client, _ = sync_client(handler, token="s3cret")
    out = client.nll("m", [NLLItem(context=("a", "b"), knowledge="k", target="t"),
                           {"source": "raw", "target": "u"}], return_tokens=True)
    body = json.loads(handler.requests[0].content)
    assert body == {"model": "m", "return_tokens": True, "items": [
        {"context": ["a", "b"], "knowledge": "k", "target": "t"}, {"source": "raw", "target": "u"}]}
    assert handler.requests[0].headers["authorization"] == "Bearer s3cret"
    assert handler.requests[0].url.path == "/v1/nll"
    assert [r.nll for r in out.results] == [1.0, 1.0] and out.stand_in and out.revision == "r"


def test_token_from_environment(monkeypatch):
    monkeypatch.setenv("DIALSCORE_TOKEN", "from-env")
    handler = Script(nll_ok)
    client, _ = sync_client(handler)
    client.nll("m", ITEMS)
    assert handler.requests[0].headers["authorization"] == "Bearer from-env"


def test_no_token_no_authorization(monkeypatch):
    monkeypatch.delenv("DIALSCORE_TOKEN", raising=False)
    handler = Script(nll_ok)
    client, _ = sync_client(handler)
    client.nll("m", ITEMS)
    assert "authorization" not in handler.requests[0].headers


def test_contradiction_and_rerank_parse_documented_shapes():
    def handler(request):
        body = json.loads(request.content)
        if request.url.path == "/v1/contradiction":
            assert body == {"threshold": 0.7, "dialogues": [
                {"turns": [{"speaker": 0, "text": "I have a dog.", "id": "t1"},
                           {"speaker": 1, "text": "Nice."}]},
                {"turns": [{"speaker": "A", "text": "x"}], "meta": 1}]}
            return httpx.Response(200, json={"results": [
                {"is_contradiction": True, "probability": 0.9,
                 "evidence": [{"turn": "t1", "probability": 0.9, "extra": 1}], "new_field": 2},
                {"is_contradiction": False, "probability": 0.1, "evidence": []}]})
        assert body == {"context": [{"speaker": "u", "text": "hi"}], "candidates": ["a", "b"],
                        "top_n": 1, "weights": {"contradiction": 1.0}}
        return httpx.Response(200, json={"results": [
            {"index": 1, "score": 0.8, "contradiction_probability": 0.1, "evidence": [], "nll": 2.0}]})

    client, _ = sync_client(handler)
    c = client.contradiction([[Turn(speaker=0, text="I have a dog.", id="t1"), {"speaker": 1, "text": "Nice."}],
                              {"turns": [{"speaker": "A", "text": "x"}], "meta": 1}], threshold=0.7)
    assert c.results[0].is_contradiction and c.results[0].evidence[0].turn == "t1"
    assert not c.results[1].is_contradiction
    r = client.rerank([{"speaker": "u", "text": "hi"}], ["a", "b"], top_n=1,
                      weights={"contradiction": 1.0})
    assert r.results[0].index == 1 and r.results[0].nll == 2.0


def test_health_never_raises():
    handler = Script(httpx.Response(200, json={"status": "ok"}),
                     httpx.Response(503, json={"deployments": {"m": "UNHEALTHY"}}))
    client, _ = sync_client(handler)
    h = client.health()
    assert h.alive and not h.ready and h.detail == {"deployments": {"m": "UNHEALTHY"}}
    down, _ = sync_client(Script(httpx.ConnectError("refused")))
    h = down.health()
    assert not h.alive and not h.ready and "ConnectError" in h.error


def test_malformed_success_body_raises_response_validation_error():
    client, _ = sync_client(Script(httpx.Response(200, json={"results": "nope"})))
    with pytest.raises(errors.ResponseValidationError):
        client.nll("m", ITEMS)
    client, _ = sync_client(Script(lambda r: ok_nll([{}, {}])))      # 2 results for 1 item
    with pytest.raises(errors.ResponseValidationError):
        client.nll("m", ITEMS)


# ------------------------------------------------------------------- error mapping

@pytest.mark.parametrize("status,type_,cls", [
    (422, "invalid_request", errors.InvalidRequestError),
    (404, "unknown_model", errors.UnknownModelError),
    (404, "not_found", errors.NotFoundError),
    (413, "payload_too_large", errors.PayloadTooLargeError),
    (401, "unauthorized", errors.AuthenticationError),
    (403, "host_not_allowed", errors.HostNotAllowedError),
    (500, "internal", errors.InternalServerError),
])
def test_non_retryable_errors_map_to_classes_and_are_sent_once(status, type_, cls):
    handler = Script(error(status, type_, "bad thing", "items[0].target"))
    client, slept = sync_client(handler)
    with pytest.raises(cls) as info:
        client.nll("m", ITEMS)
    exc = info.value
    assert len(handler.requests) == 1 and slept == []
    assert exc.status_code == status and exc.type == type_ and exc.param == "items[0].target"
    assert exc.request is handler.requests[0] and exc.response.status_code == status
    assert exc.attempts == 1 and isinstance(exc, errors.APIStatusError)


def test_422_is_not_retried_and_names_the_field():
    handler = Script(error(422, "invalid_request", "target must not be empty", "items[3].target"))
    client, slept = sync_client(handler)
    with pytest.raises(errors.InvalidRequestError) as info:
        client.nll("m", ITEMS * 4)
    assert info.value.param == "items[3].target" and "items[3].target" in str(info.value)
    assert len(handler.requests) == 1 and slept == []


def test_503_with_retry_after_is_honoured_then_succeeds():
    handler = Script(error(503, "overloaded", "queue full", headers={"Retry-After": "2"}),
                     error(503, "overloaded", "queue full", headers={"Retry-After": "0.5"}), nll_ok)
    client, slept = sync_client(handler)
    out = client.nll("m", ITEMS)
    assert out.results[0].nll == 1.0
    assert len(handler.requests) == 3
    # Retry-After plus up to retry_after_jitter (25%) of it, so clients do not come back in step.
    assert 2.0 <= slept[0] <= 2.5 and 0.5 <= slept[1] <= 0.625


def test_503_until_retries_run_out_raises_overloaded_with_retry_after():
    handler = Script(error(503, "overloaded", "queue full", headers={"Retry-After": "1"}))
    client, slept = sync_client(handler, retry=RetryPolicy(max_attempts=3))
    with pytest.raises(errors.OverloadedError) as info:
        client.nll("m", ITEMS)
    assert len(handler.requests) == 3 and all(1.0 <= d <= 1.25 for d in slept) and len(slept) == 2
    assert info.value.retry_after == 1.0 and info.value.attempts == 3 and info.value.status_code == 503
    assert isinstance(info.value, errors.RetryableError)


def test_retry_after_is_capped():
    handler = Script(error(503, "overloaded", "x", headers={"Retry-After": "3600"}), nll_ok)
    client, slept = sync_client(handler, retry=RetryPolicy(max_retry_after=5.0))
    client.nll("m", ITEMS)
    assert slept == [5.0]


@pytest.mark.parametrize("status,type_,cls", [
    (408, "timeout", errors.RequestTimeoutError),  # the gateway's: x-work-dropped: true
    (424, "model_error", errors.ModelError),
    (429, None, errors.RateLimitError),
])
def test_retryable_statuses_back_off_with_full_jitter(status, type_, cls):
    resp = error(status, type_, "later") if type_ else httpx.Response(status, text="slow down")
    handler = Script(resp, resp, resp, nll_ok)
    policy = RetryPolicy(max_attempts=5, backoff_base=0.5, backoff_max=30.0)
    client, slept = sync_client(handler, retry=policy)
    client.nll("m", ITEMS)
    assert len(slept) == 3
    for attempt, delay in enumerate(slept, start=1):
        assert 0.0 <= delay <= 0.5 * 2 ** (attempt - 1)
    client, _ = sync_client(Script(resp), retry=RetryPolicy(max_attempts=2))
    with pytest.raises(cls):
        client.nll("m", ITEMS)


def test_non_json_error_body_maps_by_status():
    client, slept = sync_client(Script(httpx.Response(502, text="<html>bad gateway</html>"), nll_ok))
    client.nll("m", ITEMS)                       # 502 from a proxy: retried
    assert len(slept) == 1
    client, slept = sync_client(Script(httpx.Response(500, text="<html>oops</html>")),
                                retry=RetryPolicy(max_attempts=2))
    with pytest.raises(errors.InternalServerError) as info:
        client.nll("m", ITEMS)
    assert "oops" in info.value.message and info.value.param is None
    assert info.value.attempts == 2 and len(slept) == 1   # a proxy's 500: retried


def test_proxy_500_is_retried_but_the_services_own_500_is_not():
    """Serve's proxy answers a plain 500 when the gateway replica dies mid-request (the request
    never reached a model, or its answer was lost): scoring is idempotent, so it is re-sent. The
    service's own `internal` 500 carries x-error-type and is a bug: re-sending cannot help."""
    handler = Script(httpx.Response(500, text="Internal Server Error"), nll_ok)
    client, slept = sync_client(handler)
    assert client.nll("m", ITEMS).results[0].nll == 1.0
    assert len(handler.requests) == 2 and len(slept) == 1
    own = error(500, "internal", "internal error; it has been logged")   # carries x-error-type
    handler = Script(own, nll_ok)
    client, slept = sync_client(handler)
    with pytest.raises(errors.InternalServerError) as info:
        client.nll("m", ITEMS)
    assert info.value.attempts == 1 and len(handler.requests) == 1 and slept == []
    client, _ = sync_client(Script(httpx.Response(500, text="x"), nll_ok),
                            retry=RetryPolicy(retry_proxy_500=False))
    with pytest.raises(errors.InternalServerError):
        client.nll("m", ITEMS)


@pytest.mark.parametrize("exc", [
    httpx.ReadError("connection reset by peer"),
    httpx.RemoteProtocolError("server disconnected without sending a response"),
    httpx.ConnectError("connection refused"),
    httpx.ConnectTimeout("timed out"),
])
def test_dropped_connections_are_retried(exc):
    handler = Script(exc, nll_ok)
    client, slept = sync_client(handler)
    assert client.nll("m", ITEMS).results[0].nll == 1.0
    assert len(handler.requests) == 2 and len(slept) == 1


def test_connection_errors_after_retries_raise_api_connection_error():
    handler = Script(httpx.ReadError("connection reset by peer"))
    client, slept = sync_client(handler, retry=RetryPolicy(max_attempts=3))
    with pytest.raises(errors.APIConnectionError) as info:
        client.nll("m", ITEMS)
    assert len(handler.requests) == 3 and info.value.attempts == 3
    assert info.value.request is not None and info.value.response is None and info.value.param is None
    assert isinstance(info.value.__cause__, httpx.ReadError)
    client, _ = sync_client(Script(httpx.ReadTimeout("slow")), retry=RetryPolicy(max_attempts=1))
    with pytest.raises(errors.APITimeoutError):
        client.nll("m", ITEMS)


def test_work_the_server_may_still_be_computing_is_not_resent():
    """A 408 without the server's word that it dropped the work (a proxy's own deadline), and
    this client's read timeout, are not retried: the first request may still be computing."""
    handler = Script(httpx.Response(408, text="Request Timeout"), nll_ok)  # e.g. Serve's proxy
    client, slept = sync_client(handler)
    with pytest.raises(errors.RequestTimeoutError):
        client.nll("m", ITEMS)
    assert len(handler.requests) == 1 and slept == []
    handler = Script(httpx.ReadTimeout("slow"), nll_ok)
    client, slept = sync_client(handler)
    with pytest.raises(errors.APITimeoutError):
        client.nll("m", ITEMS)
    assert len(handler.requests) == 1
    client, slept = sync_client(Script(httpx.ReadTimeout("slow"), nll_ok),
                                retry=RetryPolicy(retry_read_timeouts=True))
    assert client.nll("m", ITEMS).results[0].nll == 1.0


def test_retry_budget_is_shared_across_calls_and_recovers():
    """Most attempts failing: after about max_tokens/2 failures, calls stop retrying and say why;
    successes refill the bucket. One budget can be shared by several clients."""
    budget = RetryBudget(max_tokens=6, token_ratio=0.5)
    overloaded = error(503, "overloaded", "queue full", headers={"Retry-After": "1"})
    handler = Script(*([overloaded] * 20))
    client, slept = sync_client(handler, retry=RetryPolicy(max_attempts=10), retry_budget=budget)
    with pytest.raises(errors.RetryBudgetExhaustedError) as info:
        client.nll("m", ITEMS)
    # tokens 6 -> 5 -> 4 -> 3: the third failure leaves half and is not retried
    assert len(handler.requests) == 3 and len(slept) == 2
    assert "retry budget is spent" in info.value.message and "resume later" in info.value.message
    assert isinstance(info.value.__cause__, errors.OverloadedError)
    other, slept = sync_client(Script(overloaded, nll_ok), retry_budget=budget)
    with pytest.raises(errors.RetryBudgetExhaustedError):
        other.nll("m", ITEMS)  # another call, another client: the same spent budget
    assert slept == []
    refill, _ = sync_client(Script(*([nll_ok] * 6)), retry_budget=budget)
    for _ in range(6):
        refill.nll("m", ITEMS)
    assert not budget.exhausted
    again, slept = sync_client(Script(overloaded, nll_ok), retry_budget=budget)
    assert again.nll("m", ITEMS).results[0].nll == 1.0 and len(slept) == 1


def test_parse_retry_after_forms():
    assert parse_retry_after("3") == 3.0
    assert parse_retry_after("0.25") == 0.25
    assert parse_retry_after(None) is None and parse_retry_after("soon") is None
    now = time.time()
    date = email.utils.formatdate(now + 10, usegmt=True)
    assert 8.0 <= parse_retry_after(date, now=now) <= 10.0


# ------------------------------------------------------------------- chunking

def numbered(n: int) -> list[dict]:
    return [{"context": ["c"], "target": f"t{i}"} for i in range(n)]


def by_target(request: httpx.Request) -> httpx.Response:
    items = json.loads(request.content)["items"]
    # Later chunks answer faster, so chunks complete out of order.
    first = int(items[0]["target"][1:])
    time.sleep(max(0.0, 0.02 - first * 0.0002))
    return ok_nll(items, lambda i, it: float(it["target"][1:]))


def test_plan_chunks_bounds_items_and_bytes():
    items = numbered(10)
    assert [(o, len(c)) for o, c in plan_chunks(items, 4)] == [(0, 4), (4, 4), (8, 2)]
    size = len(json.dumps(items[0])) + 1
    assert [len(c) for _, c in plan_chunks(items, 100, max_chunk_bytes=3 * size)] == [3, 3, 3, 1]
    with pytest.raises(ValueError):
        plan_chunks(items, 0)


def test_nll_many_keeps_order_and_bounds_requests():
    sizes: list[int] = []
    lock = threading.Lock()

    def handler(request):
        with lock:
            sizes.append(len(json.loads(request.content)["items"]))
        return by_target(request)

    client, _ = sync_client(handler, max_concurrency=4)
    seen: list[int] = []
    results = client.nll_many("m", numbered(103), chunk_size=10,
                              on_chunk=lambda off, res: seen.append(off))
    assert [r.nll for r in results] == [float(i) for i in range(103)]
    assert max(sizes) == 10 and sum(sizes) == 103 and len(sizes) == 11
    assert sorted(seen) == list(range(0, 103, 10))


def test_nll_many_reports_each_chunk_as_it_finishes_not_at_the_end():
    """A chunk's results reach ``on_chunk`` while other chunks are still in flight (a probe run
    saves them then; a run killed mid-way keeps them). The last chunk's request is held until
    the first chunk has been reported: the call would hang if reports waited for every chunk."""
    first_reported = threading.Event()

    def handler(request):
        items = json.loads(request.content)["items"]
        if items[0]["target"] == "t9":  # the last chunk (items 9 and 10)
            assert first_reported.wait(10), "no chunk was reported while another was in flight"
        return by_target(request)

    client, _ = sync_client(handler, max_concurrency=2)
    seen: list[int] = []

    def on_chunk(offset: int, results) -> None:
        seen.append(offset)
        first_reported.set()

    results = client.nll_many("m", numbered(11), chunk_size=9, on_chunk=on_chunk)
    assert [r.nll for r in results] == [float(i) for i in range(11)]
    assert seen == [0, 9]


def test_nll_many_splits_a_chunk_refused_as_too_large():
    def handler(request):
        items = json.loads(request.content)["items"]
        if len(items) > 3:
            return error(413, "payload_too_large", "at most 3 items", "items")
        return by_target(request)

    client, _ = sync_client(handler)
    results = client.nll_many("m", numbered(20), chunk_size=8)
    assert [r.nll for r in results] == [float(i) for i in range(20)]


def test_nll_many_error_names_the_item_in_the_whole_job():
    items = numbered(40)
    items[37] = {"context": ["c"], "target": ""}
    client, _ = (DialscoreClient("http://test", transport=ContractFake().transport()), [])
    with pytest.raises(errors.InvalidRequestError) as info:
        client.nll_many("fake-gpt", items, chunk_size=8)
    assert info.value.param == "items[37].target"


# ------------------------------------------------------------------- async client

def test_async_client_mirrors_sync_methods():
    sync_methods = {n for n in dir(DialscoreClient) if not n.startswith("_")}
    async_methods = {n for n in dir(AsyncDialscoreClient) if not n.startswith("_")}
    assert sync_methods - {"close"} == async_methods - {"aclose"}


def test_async_retries_errors_and_concurrency_limit():
    state = {"in_flight": 0, "max": 0, "calls": 0}

    async def handler(request):
        state["calls"] += 1
        if state["calls"] == 1:
            return error(503, "overloaded", "busy", headers={"Retry-After": "1.5"})
        if state["calls"] == 2:
            raise httpx.RemoteProtocolError("peer closed connection")
        state["in_flight"] += 1
        state["max"] = max(state["max"], state["in_flight"])
        await asyncio.sleep(0.005)
        state["in_flight"] -= 1
        items = json.loads(request.content)["items"]
        return ok_nll(items, lambda i, it: float(it["target"][1:]))

    async def main():
        slept: list[float] = []

        async def fake_sleep(s):
            slept.append(s)

        async with AsyncDialscoreClient("http://test", transport=httpx.MockTransport(handler),
                                        max_concurrency=3) as client:
            client._sleep = fake_sleep
            results = await client.nll_many("m", numbered(95), chunk_size=5)
            assert [r.nll for r in results] == [float(i) for i in range(95)]
            assert 1.5 <= slept[0] <= 1.875 and len(slept) == 2  # Retry-After + jitter
            assert 1 < state["max"] <= 3
            bad = AsyncDialscoreClient("http://test", transport=httpx.MockTransport(
                lambda r: error(422, "invalid_request", "no", "items[1].target")))
            with pytest.raises(errors.InvalidRequestError) as info:
                await bad.nll_many("m", numbered(12), chunk_size=4)
            assert info.value.param.startswith("items[") and info.value.param.endswith("].target")
            await bad.aclose()

    asyncio.run(main())


def test_async_models_nll_and_health_against_fake_server():
    async def main():
        async with AsyncDialscoreClient("http://test", transport=ContractFake().transport()) as client:
            names = [m.name for m in await client.models()]
            assert names == ["fake-gpt", "fake-bart", "fake-nli"]
            out = await client.nll("fake-gpt", ITEMS)
            assert out.revision == "0123abcd" and len(out.results) == 1
            with pytest.raises(errors.UnknownModelError) as info:
                await client.nll("nope", ITEMS)
            assert info.value.param == "model"
            assert (await client.health()).ready

    asyncio.run(main())
