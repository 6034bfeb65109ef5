"""Waiting for the service (RetryPolicy.unreachable_wait_s): refused connections, as while Serve's
proxy on a node is replaced, are outlasted up to the policy's bound and then reported clearly.

Time is the client's own sleep, replaced by a recorder: the tests count refusals and add up the
delays the client chose, nothing waits on a clock. The loopback test uses a real socket: its
port refuses connections until the test, from the client's sleep, starts a server there.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from dialscore import errors
from dialscore.client import AsyncDialscoreClient, DialscoreClient, RetryPolicy
from dialscore.retry_budget import RetryBudget
from contract_fake import ContractFake

REFUSED = httpx.ConnectError("[Errno 111] Connection refused")


class Refusing:
    """A transport handler: the first `refusals` connections are refused, then `fake` answers."""

    def __init__(self, refusals: int, fake: ContractFake | None = None):
        self.left = refusals
        self.fake = fake or ContractFake()
        self.refused = 0

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if self.left > 0:
            self.left -= 1
            self.refused += 1
            raise REFUSED
        return self.fake.handle(request)


def client_for(handler, policy: RetryPolicy, budget: RetryBudget | None = None):
    client = DialscoreClient("http://test", transport=httpx.MockTransport(handler), retry=policy,
                             retry_budget=budget)
    slept: list[float] = []
    client._sleep = slept.append
    return client, slept


def test_the_default_policy_outlasts_the_documented_proxy_outage():
    """Ray's default proxy health checks leave a node's proxy down about 30 s (3 failed checks 10 s
    apart); the default wait (60 s) is twice that, the old default (5 attempts) gave up after at
    most 7.5 s of backoff."""
    policy = RetryPolicy()
    assert policy.unreachable_wait_s >= 2 * 30 and policy.max_attempts == 5


@pytest.mark.parametrize("refusals", [1, 4, 30])
def test_a_call_outlasts_refused_connections_without_spending_attempts_or_budget(refusals):
    budget = RetryBudget(max_tokens=4, token_ratio=0.5)
    handler = Refusing(refusals)
    client, slept = client_for(handler, RetryPolicy(max_attempts=2, unreachable_wait_s=1e6), budget)
    assert [m.name for m in client.models()] == list(handler.fake.cards)
    assert handler.refused == refusals and len(slept) == refusals
    assert all(0 <= d <= 2.0 for d in slept)              # unreachable_backoff_max
    assert budget.tokens == 4                              # refusals take no token (a success refills)


def test_a_call_gives_up_once_it_has_waited_the_bound_and_says_why():
    policy = RetryPolicy(unreachable_wait_s=10.0, unreachable_backoff_max=1.0)
    handler = Refusing(10**6)
    client, slept = client_for(handler, policy)
    with pytest.raises(errors.APIConnectionError) as info:
        client.models()
    waited = sum(slept)
    assert policy.unreachable_wait_s <= waited < policy.unreachable_wait_s + policy.unreachable_backoff_max
    assert handler.refused == len(slept) + 1               # the refusal after the last wait raises
    message = info.value.message
    assert "unreachable" in message and "unreachable_wait_s=10" in message
    assert f"{handler.refused} connections refused" in message
    assert isinstance(info.value.__cause__, httpx.ConnectError)


def test_a_refusal_counts_as_an_attempt_when_waiting_is_off():
    handler = Refusing(10**6)
    client, slept = client_for(handler, RetryPolicy(max_attempts=3, unreachable_wait_s=0))
    with pytest.raises(errors.APIConnectionError) as info:
        client.models()
    assert handler.refused == 3 and info.value.attempts == 3 and len(slept) == 2


def test_refusals_do_not_reset_the_attempts_other_failures_spent():
    """Refusals between 503s: the 503s still count up to max_attempts."""
    unavailable = httpx.Response(503, text="no replica")
    steps = iter([unavailable, REFUSED, REFUSED, unavailable, REFUSED, unavailable, unavailable])

    def handler(request):
        step = next(steps)
        if isinstance(step, Exception):
            raise step
        return step

    client, slept = client_for(handler, RetryPolicy(max_attempts=3))
    with pytest.raises(errors.APIStatusError) as info:
        client.models()
    assert info.value.response.status_code == 503 and info.value.attempts == 3
    assert len(slept) == 5                                  # 2 after 503s, 3 after refusals


def test_the_async_client_waits_the_same_way():
    import asyncio

    handler = Refusing(6)

    async def main():
        client = AsyncDialscoreClient("http://test", transport=httpx.MockTransport(handler),
                                      retry=RetryPolicy(max_attempts=1))
        slept: list[float] = []

        async def sleep(d):
            slept.append(d)

        client._sleep = sleep
        async with client:
            return await client.models(), slept

    models, slept = asyncio.run(main())
    assert models and handler.refused == 6 and len(slept) == 6


# ------------------------------------------------------------------ a real refusing port

class _Models(BaseHTTPRequestHandler):
    fake = ContractFake()

    def do_GET(self):  # noqa: N802 - http.server's name
        request = httpx.Request("GET", f"http://test{self.path}")
        response = self.fake.handle(request)
        self.send_response(response.status_code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(response.content)))
        self.end_headers()
        self.wfile.write(response.content)

    def log_message(self, *args):
        pass


def reserved_port() -> tuple[socket.socket, int]:
    """A loopback port bound but not listening: connecting to it is refused."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    return sock, sock.getsockname()[1]


@contextmanager
def serving_on(port: int) -> Iterator[None]:
    server = ThreadingHTTPServer(("127.0.0.1", port), _Models)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield
    finally:
        server.shutdown()
        server.server_close()


def test_a_loopback_port_that_refuses_until_the_test_opens_it():
    """Real refused connections (the kernel's RST) until, at the 3rd wait, the port gets a server."""
    sock, port = reserved_port()
    opened: list[object] = []
    waits: list[float] = []
    with DialscoreClient(f"http://127.0.0.1:{port}", retry=RetryPolicy(max_attempts=1)) as client:
        def sleep(delay: float) -> None:
            waits.append(delay)
            if len(waits) == 3:
                sock.close()
                opened.append(serving_on(port))
                opened[0].__enter__()

        client._sleep = sleep
        try:
            assert [m.name for m in client.models()] == list(_Models.fake.cards)
        finally:
            if opened:
                opened[0].__exit__(None, None, None)
            sock.close()
    assert len(waits) == 3


def test_a_loopback_port_that_stays_closed_is_reported_after_the_bound():
    sock, port = reserved_port()
    try:
        policy = RetryPolicy(unreachable_wait_s=3.0, unreachable_backoff_max=0.5)
        with DialscoreClient(f"http://127.0.0.1:{port}", retry=policy) as client:
            waits: list[float] = []
            client._sleep = waits.append
            with pytest.raises(errors.APIConnectionError, match="unreachable"):
                client.models()
    finally:
        sock.close()
    assert 3.0 <= sum(waits) < 3.5


def test_a_new_proxys_plain_404_is_retried_and_the_services_own_404_is_not():
    """A Serve proxy just started answers 404 without the service's error body until it has the
    application's routes; the service's own 404s carry ``x-error-type`` and are final."""
    from contract_fake import error

    fake = ContractFake()
    routes_missing = httpx.Response(404, text="Path '/v1/models' not found.")
    answers = iter([routes_missing, routes_missing])

    def handler(request):
        return next(answers, None) or fake.handle(request)

    client, slept = client_for(handler, RetryPolicy())
    assert list(client.models()) and len(slept) == 2

    own = error(404, "not_found", "no such route")
    client, slept = client_for(lambda request: own, RetryPolicy())
    with pytest.raises(errors.NotFoundError):
        client.models()
    assert slept == []
    # Another web app's JSON 404 (a route it does not have) is final too.
    client, slept = client_for(lambda request: httpx.Response(404, json={"detail": "Not Found"}),
                               RetryPolicy())
    with pytest.raises(errors.NotFoundError):
        client.models()
    assert slept == []
    client, slept = client_for(lambda request: routes_missing, RetryPolicy(retry_proxy_404=False))
    with pytest.raises(errors.NotFoundError):
        client.models()
    assert slept == []
