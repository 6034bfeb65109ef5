"""Limits discovery: `limits()` reads GET /openapi.json's info["x-limits"] once per client,
tolerates a deployment that publishes none, and `nll_many` keeps its chunks within what it read;
a 413 still splits a chunk when the limits are unknown."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from dialscore import errors
from dialscore.client import AsyncDialscoreClient, DialscoreClient, RetryPolicy
from dialscore.types import PublishedLimits
from contract_fake import DEFAULT_LIMITS, ContractFake, hash_nll

ITEMS = [{"context": ["how are you ?"], "target": f"fine number {i} ."} for i in range(23)]


def client_for(api: ContractFake, **kw) -> DialscoreClient:
    return DialscoreClient("http://fake", transport=api.transport(), **kw)


def expected(items) -> list[float]:
    return [hash_nll("fake-gpt", item) for item in items]


def test_limits_are_read_once_from_openapi():
    api = ContractFake(limits={"max_items": 5, "max_dialogues": 3, "max_candidates": 2})
    with client_for(api) as client:
        first = client.limits()
        assert first == client.limits()
    assert isinstance(first, PublishedLimits)
    assert (first.max_items, first.max_dialogues, first.max_candidates) == (5, 3, 2)
    assert first.max_body_bytes == DEFAULT_LIMITS["max_body_bytes"]
    assert first.max_turns == DEFAULT_LIMITS["max_turns"]
    assert api.paths.count("/openapi.json") == 1


def test_async_client_reads_and_caches_the_same_limits():
    api = ContractFake(limits={"max_items": 7})

    async def main():
        async with AsyncDialscoreClient("http://fake", transport=api.transport()) as client:
            got = await asyncio.gather(client.limits(), client.limits(), client.limits())
            return got

    got = asyncio.run(main())
    assert {g.max_items for g in got} == {7}
    assert api.paths.count("/openapi.json") == 1


@pytest.mark.parametrize("answer", [
    httpx.Response(404, json={"detail": "Not Found"}),         # openapi switched off
    httpx.Response(200, json={"openapi": "3.1.0", "info": {"title": "older server"}}),
    httpx.Response(200, json={"info": {"x-limits": {"max_items": "many"}}}),
    httpx.Response(200, text="<html>a proxy's page</html>"),
])
def test_a_deployment_that_publishes_no_limits_gives_none_once(answer):
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.url.path)
        return answer

    with DialscoreClient("http://test", transport=httpx.MockTransport(handler)) as client:
        assert client.limits() is None and client.limits() is None
    assert seen == ["/openapi.json"]


def test_a_failing_server_is_not_taken_for_one_without_limits():
    handler = httpx.MockTransport(lambda r: httpx.Response(500, text="boom"))
    with DialscoreClient("http://test", transport=handler, retry=RetryPolicy(max_attempts=1)) as client:
        with pytest.raises(errors.InternalServerError):
            client.limits()


def test_nll_many_chunks_within_the_published_max_items():
    api = ContractFake(limits={"max_items": 5})
    with client_for(api, max_concurrency=3) as client:
        client.limits()
        results = client.nll_many("fake-gpt", ITEMS, chunk_size=64)
    assert [r.nll for r in results] == pytest.approx(expected(ITEMS))
    assert api.max_request_items == 5 and api.nll_requests == 5  # 23 items: 5+5+5+5+3, no 413


def test_nll_many_chunks_within_the_published_body_size():
    long = [{"context": ["x " * 300], "target": f"reply {i:02d}"} for i in range(12)]
    item_bytes = len(json.dumps(long[0])) + 1
    # Room for three items besides the 4096 bytes the client keeps for the rest of the body.
    api = ContractFake(limits={"max_body_bytes": 4096 + 3 * item_bytes})
    with client_for(api) as client:
        client.limits()
        results = client.nll_many("fake-gpt", long, chunk_size=64)
    assert [r.nll for r in results] == pytest.approx(expected(long))
    assert api.max_request_items == 3
    assert api.paths.count("/v1/nll") == 4           # every request accepted: no 413 to split


def test_unknown_limits_fall_back_to_splitting_on_413():
    api = ContractFake(limits={"max_items": 5})
    with client_for(api) as client:                 # limits() never called: nothing known
        results = client.nll_many("fake-gpt", ITEMS, chunk_size=64)
    assert [r.nll for r in results] == pytest.approx(expected(ITEMS))
    assert api.max_request_items <= 5

    async def main():
        async with AsyncDialscoreClient("http://fake", transport=api.transport()) as client:
            return await client.nll_many("fake-gpt", ITEMS, chunk_size=16)

    assert [r.nll for r in asyncio.run(main())] == pytest.approx(expected(ITEMS))
