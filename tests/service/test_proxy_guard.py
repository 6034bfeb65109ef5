"""The proxy guard's protocol (gateway/proxy_guard.py) on a real uvicorn server on loopback,
without Ray: a header deadline and a connection cap, each answered with the service's JSON error
body and counted. (Through Ray Serve's own proxy: tests/service/test_slow_clients.py.)"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import Iterator

import pytest
import uvicorn

from dialscore_server import metrics
from dialscore_server.gateway.embedded import free_port
from dialscore_server.gateway.proxy_guard import GuardedHttpToolsProtocol
from raw_socket import read_until_closed


async def app(scope, receive, send):
    """A plain ASGI app: 200 "ok" to every request."""
    if scope["type"] != "http":
        return
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"text/plain"), (b"content-length", b"2")]})
    await send({"type": "http.response.body", "body": b"ok"})


@pytest.fixture()
def server() -> Iterator[int]:
    """uvicorn with the guarded protocol: 1 s header deadline, at most 2 open connections."""
    protocol = type("Protocol", (GuardedHttpToolsProtocol,),
                    {"header_timeout_s": 1.0, "max_connections": 2})
    port = free_port()
    srv = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, http=protocol,
                                        lifespan="off", log_level="warning",
                                        timeout_keep_alive=30))
    thread = threading.Thread(target=lambda: asyncio.run(srv.serve()), daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not srv.started:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    yield port
    srv.should_exit = True
    thread.join(10)


def request(sock: socket.socket) -> bytes:
    """One GET on a kept-alive connection; the raw answer."""
    sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    answer = b""
    while b"\r\n\r\n" not in answer or not answer.endswith((b"ok", b"}")):
        chunk = sock.recv(65536)
        if not chunk:
            break
        answer += chunk
    return answer


def count(kind: str) -> float:
    return metrics.SLOW_CLIENTS._prom.labels(kind)._value.get()


def test_a_request_whose_headers_are_late_gets_a_408(server):
    before = count("headers")
    with socket.create_connection(("127.0.0.1", server), timeout=10) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n")  # the blank line never comes
        answer, waited = read_until_closed(sock, 30)
    assert answer.startswith(b"HTTP/1.1 408"), answer
    body = json.loads(answer.split(b"\r\n\r\n", 1)[1])
    assert body["error"]["type"] == "timeout" and body["error"]["param"] == "headers"
    assert b"x-error-type: timeout" in answer.lower()
    assert 0.8 < waited < 30  # not before the deadline; never a hang (a busy machine is slow)
    assert count("headers") == before + 1


def test_a_connection_that_sends_nothing_is_closed_and_a_kept_alive_one_is_not(server):
    before = count("idle")
    with socket.create_connection(("127.0.0.1", server), timeout=10) as idle, \
            socket.create_connection(("127.0.0.1", server), timeout=10) as kept:
        assert request(kept).startswith(b"HTTP/1.1 200")
        answer, waited = read_until_closed(idle, 30)
        assert answer == b"" and 0.8 < waited < 30
        time.sleep(1.5)  # past the header deadline: a kept-alive connection is not a late one
        assert request(kept).startswith(b"HTTP/1.1 200")
    assert count("idle") == before + 1


def test_connections_beyond_the_cap_get_a_503_and_earlier_ones_are_served(server):
    before = count("connections")
    with socket.create_connection(("127.0.0.1", server), timeout=10) as a, \
            socket.create_connection(("127.0.0.1", server), timeout=10) as b:
        assert request(a).startswith(b"HTTP/1.1 200")
        assert request(b).startswith(b"HTTP/1.1 200")
        with socket.create_connection(("127.0.0.1", server), timeout=10) as c:
            answer = request(c)
            assert answer.startswith(b"HTTP/1.1 503"), answer
            assert b"retry-after: 1" in answer.lower()
            assert json.loads(answer.split(b"\r\n\r\n", 1)[1])["error"]["type"] == "overloaded"
            assert read_until_closed(c, 3)[0] == b""  # then closed
        assert request(a).startswith(b"HTTP/1.1 200")  # admitted ones still served
    assert count("connections") == before + 1
    with socket.create_connection(("127.0.0.1", server), timeout=10) as d:
        assert request(d).startswith(b"HTTP/1.1 200")  # room again once they closed
