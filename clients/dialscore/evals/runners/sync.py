"""The sync entry points (`run_mutual`, ...): a runner coroutine on an async client that mirrors a
sync client.

The async client gets the sync client's URL, headers, timeout and retry policy and `concurrency`
requests in flight (default: the client's `max_concurrency`; 16 for a URL). A transport injected
into the sync client is not carried over: pass an async client with that transport to the
coroutine instead.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from dialscore.client import AsyncDialscoreClient, DialscoreClient

__all__ = ["run_sync"]

T = TypeVar("T")


def run_sync(client: DialscoreClient | str, concurrency: int | None, name: str,
             make: Callable[[AsyncDialscoreClient], Awaitable[T]]) -> T:
    """Run ``make(async_client)`` to completion in a new event loop and return its result.
    `name` ("mutual", ...) names the runner in the errors: a TypeError for an async client, a
    RuntimeError when called inside a running event loop."""
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
            mirror = AsyncDialscoreClient(client, max_concurrency=concurrency or 16)
        else:
            mirror = AsyncDialscoreClient(client.base_url, token="", timeout=client.timeout,
                                          retry=client.retry, headers=client.headers,
                                          max_concurrency=concurrency or client.max_concurrency)
        async with mirror:
            return await make(mirror)

    return asyncio.run(main())
