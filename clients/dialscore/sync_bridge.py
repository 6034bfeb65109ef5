"""The sync entry points (`run_probes`, `run_mutual`, ...): a runner coroutine run to completion on
an async client that mirrors a sync client. Every runner has one implementation, the coroutine.

The async client gets the sync client's URL, headers (its token included), timeout, retry policy,
retry budget and transport, and `concurrency` requests in flight (default: the client's
`max_concurrency`; 16 for a URL). A transport that serves async clients too (such as
``httpx.MockTransport``) is used as it is; a sync-only one (an ``httpx.HTTPTransport`` the caller
configured) is called from a worker thread, each response read whole there.

The runs are bulk work: they ask for the bulk priority lane (``X-Dialscore-Priority: bulk``), so
interactive callers of the same service keep their latency, unless the sync client names a
priority itself (``DialscoreClient(..., priority="interactive")``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, TypeVar

import httpx

if TYPE_CHECKING:
    from dialscore.client import AsyncDialscoreClient, DialscoreClient

__all__ = ["ThreadedTransport", "run_sync"]

T = TypeVar("T")


class ThreadedTransport(httpx.AsyncBaseTransport):
    """A sync transport serving an async client: each request is sent from a worker thread and
    its response read whole there (its bytes as received: decoding stays the client's)."""

    def __init__(self, transport: httpx.BaseTransport):
        self.transport = transport

    def _send(self, request: httpx.Request) -> httpx.Response:
        response = self.transport.handle_request(request)
        try:
            raw = b"".join(response.stream)
        finally:
            response.close()
        return httpx.Response(response.status_code, headers=response.headers,
                              stream=httpx.ByteStream(raw), extensions=response.extensions)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        return await asyncio.to_thread(self._send, request)


def _async_transport(transport: httpx.BaseTransport | None) -> httpx.AsyncBaseTransport | None:
    if transport is None or isinstance(transport, httpx.AsyncBaseTransport):
        return transport
    return ThreadedTransport(transport)


def run_sync(client: DialscoreClient | str, concurrency: int | None, name: str,
             make: Callable[[AsyncDialscoreClient], Awaitable[T]]) -> T:
    """Run ``make(async_client)`` to completion in a new event loop and return its result.
    `name` ("probes", "mutual", ...) names the runner in the errors: a TypeError for an async
    client, a RuntimeError when called inside a running event loop."""
    from dialscore.client import AsyncDialscoreClient

    if isinstance(client, AsyncDialscoreClient):
        raise TypeError(f"run_{name} takes a DialscoreClient or a URL; use `await arun_{name}(...)` "
                        "with an AsyncDialscoreClient")
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        raise RuntimeError(f"run_{name} was called inside a running event loop; use "
                           f"`await arun_{name}(...)`")

    async def main() -> T:
        if isinstance(client, str):
            mirror = AsyncDialscoreClient(client, max_concurrency=concurrency or 16,
                                          priority="bulk")
        else:
            mirror = AsyncDialscoreClient(client.base_url, token="", timeout=client.timeout,
                                          retry=client.retry, priority="bulk",
                                          headers=client.headers,
                                          max_concurrency=concurrency or client.max_concurrency,
                                          transport=_async_transport(client.transport),
                                          retry_budget=client.retry_budget)
        async with mirror:
            return await make(mirror)

    return asyncio.run(main())
