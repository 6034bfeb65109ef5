"""Priority lanes at the HTTP API (contract/priority.py), in-process over fake engines: every
scoring route takes the X-Dialscore-Priority header, dialscore's own routes and completions the
body field `priority` (vLLM's meaning), a bad value is a 422 naming the header or the field, a
request over the interactive cost cap is served in bulk whatever it asks, and every answer says
its lane in x-dialscore-lane."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from fake_api import FakeAPI

CONTEXT = [{"speaker": 1, "text": "I love dogs."}, {"speaker": 2, "text": "Me too."}]
ROUTES: dict[str, dict[str, Any]] = {
    "/v1/nll": {"model": "fake-gpt", "items": [{"context": ["hi"], "target": "hello"}]},
    "/v1/contradiction": {"dialogues": [{"turns": [*CONTEXT, {"speaker": 1,
                                                               "text": "I hate dogs."}]}]},
    "/v1/rerank": {"context": CONTEXT, "candidates": ["I hate dogs.", "Yes."]},
}
#: The fake engine does not complete: this body reaches the route's checks only.
COMPLETIONS = {"model": "fake-gpt", "prompt": "hello there", "max_tokens": 0}
QUERY_ROUTES: dict[str, dict[str, Any]] = {
    "/rerank": {"query": "I love dogs.\nMe too.", "texts": ["I hate dogs."]},
    "/v2/rerank": {"query": "I love dogs.\nMe too.", "documents": ["I hate dogs."]},
}
#: 70 earlier turns of the last speaker: 70 NLI pairs, over the default cap (chunk_pairs 64).
COSTLY = {"dialogues": [{"turns": [{"speaker": 1, "text": f"I have {j} dogs."}
                                   for j in range(71)]}]}


def post(path: str, body: dict, headers: dict | None = None) -> httpx.Response:
    api = FakeAPI()

    async def go() -> httpx.Response:
        async with httpx.AsyncClient(transport=api.transport(), base_url="http://fake") as http:
            return await http.post(path, json=body, headers=headers or {})

    return asyncio.run(go())


@pytest.mark.parametrize("path", [*ROUTES, *QUERY_ROUTES])
@pytest.mark.parametrize("header,lane", [(None, "interactive"), ("bulk", "bulk"),
                                         (" Interactive ", "interactive")])
def test_every_scoring_route_serves_the_lane_its_header_asks_for_and_says_so(path, header, lane):
    body = {**ROUTES, **QUERY_ROUTES}[path]
    r = post(path, body, {"X-Dialscore-Priority": header} if header else None)
    assert r.status_code == 200, r.text[:300]
    assert r.headers["x-dialscore-lane"] == lane


@pytest.mark.parametrize("path", ROUTES)
@pytest.mark.parametrize("priority,lane", [(1, "bulk"), (0, "interactive"), (-5, "interactive")])
def test_the_body_priority_asks_as_vllm_means_it(path, priority, lane):
    r = post(path, {**ROUTES[path], "priority": priority})
    assert r.status_code == 200, r.text[:300]
    assert r.headers["x-dialscore-lane"] == lane


def test_asking_for_bulk_either_way_is_enough():
    r = post("/v1/rerank", {**ROUTES["/v1/rerank"], "priority": 0},
             {"X-Dialscore-Priority": "bulk"})
    assert r.headers["x-dialscore-lane"] == "bulk"


ALL_BODIES = {**ROUTES, **QUERY_ROUTES, "/v1/completions": COMPLETIONS}


@pytest.mark.parametrize("path", ALL_BODIES)
def test_a_bad_header_is_a_422_naming_it(path):
    r = post(path, ALL_BODIES[path], {"X-Dialscore-Priority": "urgent"})
    assert r.status_code == 422
    assert r.json()["error"]["param"] == "X-Dialscore-Priority"


@pytest.mark.parametrize("path", [*ROUTES, "/v1/completions"])
def test_a_priority_that_is_not_an_integer_is_a_422_naming_it(path):
    r = post(path, {**ALL_BODIES[path], "priority": "high"})
    assert r.status_code == 422
    assert r.json()["error"]["param"] == "priority"


def test_a_request_over_the_interactive_cost_cap_is_served_in_bulk_whatever_it_asks():
    r = post("/v1/contradiction", {**COSTLY, "priority": -1},
             {"X-Dialscore-Priority": "interactive"})
    assert r.status_code == 200, r.text[:300]
    assert r.headers["x-dialscore-lane"] == "bulk"
