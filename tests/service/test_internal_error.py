"""The service's own 500: a bug in the service (here, a model service that raises something no
error type covers) answers 500 ``internal`` in the one error shape, with ``x-error-type:
internal`` (which the client never retries), and the request is counted under its endpoint."""

from __future__ import annotations

import asyncio

import httpx

from dialscore_server.contract.limits import Limits
from dialscore_server.gateway.app import create_app
from dialscore_server.directory import ModelDirectory
from fake_api import FAKE_CARDS


class BrokenNLL:
    """A dialogue model whose scoring has a bug."""

    async def score(self, items, return_tokens=False, lane="interactive"):
        raise RuntimeError("a bug")

    async def complete(self, call, lane="interactive"):
        raise RuntimeError("a bug")

    async def card(self):
        return FAKE_CARDS[0]


def test_a_bug_is_a_500_internal_in_the_error_shape():
    app = create_app(ModelDirectory({"fake-gpt": BrokenNLL()}, limits=Limits()))
    # As a server does: the response is sent, then the exception is re-raised for its log.
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)

    async def go() -> tuple[httpx.Response, str]:
        async with httpx.AsyncClient(transport=transport, base_url="http://app") as http:
            r = await http.post("/v1/nll", json={"model": "fake-gpt",
                                                 "items": [{"context": ["hi"], "target": "hello"}]})
            return r, (await http.get("/metrics")).text

    r, metrics = asyncio.run(go())
    assert r.status_code == 500
    assert r.headers["x-error-type"] == "internal"
    assert r.json()["error"]["type"] == "internal" and "a bug" not in r.text  # no internals leak
    assert "retry-after" not in r.headers and "x-work-dropped" not in r.headers
    assert 'dialscore_errors_total{endpoint="/v1/nll",type="internal"}' in metrics
