"""Slow clients on the real app, through the embedded default's front door: a body trickled byte
by byte is cut off by the gateway with a 408 once body_timeout_s has passed; headers trickled to
a front door get a 408 once its header deadline has passed (HEADER_TIMEOUT_S: a front door of
this module's own before the session's Serve proxy, the session's own having a hang guard), a
connection that sends nothing is closed; each is counted, the front door's counts reach Ray's
metrics agent, and a prompt client of the same app is unaffected.

Outcomes only: a deadline cannot fire early, so elapsed times have lower bounds; the upper ones
are hang guards, never a speed requirement."""

from __future__ import annotations

import json
import re
import socket
import time
from collections.abc import Iterator
from urllib.parse import urlsplit

import httpx
import pytest

from dialscore_server.metric_recording import REGISTRY
from raw_socket import rest_until_closed
from serve_apps import HEADER_TIMEOUT_S, ONE_THREAD, app_args, deploy_app

pytestmark = [pytest.mark.serve, pytest.mark.slow]

#: How long a test waits for an outcome before calling it a hang.
HANG_S = 120.0


def gateway_count(url: str) -> float:
    """dialscore_slow_clients_total{kind="body"} from the gateway's GET /metrics."""
    text = httpx.get(f"{url}/metrics", timeout=30).text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith('dialscore_slow_clients_total{kind="body"}'))


def front_door_count(kind: str) -> float:
    """The front door's count of `kind`, in this process's registry (it runs in this process)."""
    return REGISTRY.get_sample_value("dialscore_slow_clients_total", {"kind": kind}) or 0.0


def ray_agent_count(kind: str) -> float:
    """ray_dialscore_slow_clients_total{kind=...} as Ray's metrics agent exports it."""
    import ray

    (node,) = [n for n in ray.nodes() if n["Alive"]]
    text = httpx.get(f"http://{node['NodeManagerAddress']}:{node['MetricsExportPort']}/metrics",
                     timeout=30).text
    pattern = re.compile(r'^ray_dialscore_slow_clients_total\{[^}]*kind="%s"[^}]*\} (\S+)$' % kind)
    return sum(float(m.group(1)) for line in text.splitlines() if (m := pattern.match(line)))


def assert_app_answers(url: str) -> None:
    ok = httpx.post(f"{url}/v1/nll", json={"model": "dialogpt-medium", "items": [
        {"context": ["Hi"], "target": "Hello"}]}, timeout=HANG_S)
    assert ok.status_code == 200, ok.text[:300]


def test_a_trickled_body_gets_a_408_after_body_timeout(served, stand_ins):
    timeout_s = 1.5
    args = app_args(stand_ins, models=[{"name": "dialogpt-medium", "serving": ONE_THREAD}],
                    body_timeout_s=timeout_s)
    with deploy_app(served, "slowbody", args) as app:
        parts = urlsplit(app.url)
        before = gateway_count(app.url)
        with socket.create_connection((parts.hostname, parts.port), timeout=HANG_S) as sock:
            sock.sendall((f"POST {parts.path}/v1/nll HTTP/1.1\r\nHost: {parts.hostname}\r\n"
                          "Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n").encode())
            start = time.monotonic()
            sock.settimeout(0.5)
            answer = b""
            # One byte every 0.5 s: the 1000 bytes would take 500 s, far past the deadline.
            while time.monotonic() - start < HANG_S and b"\r\n\r\n" not in answer:
                try:
                    sock.sendall(b" ")
                except OSError:
                    break
                try:
                    chunk = sock.recv(65536)
                    if not chunk:
                        break
                    answer += chunk
                except TimeoutError:
                    pass
            elapsed = time.monotonic() - start
            answer += rest_until_closed(sock, HANG_S)
        assert answer.startswith(b"HTTP/1.1 408"), answer[:300]
        assert b"x-error-type: timeout" in answer.lower() and b"body_timeout_s" in answer
        assert json.loads(answer.split(b"\r\n\r\n", 1)[1])["error"]["param"] == "body"
        assert elapsed >= timeout_s
        assert gateway_count(app.url) == before + 1
        assert_app_answers(app.url)


@pytest.fixture(scope="module")
def door(served) -> Iterator[str]:
    """The URL of a front door with the header deadline HEADER_TIMEOUT_S before the session's
    Serve proxy (as the embedded default puts one with DIALSCORE_HEADER_TIMEOUT_S=3)."""
    from dialscore_server.gateway.front_door import FrontDoorLimits, front_door_thread

    proxy = urlsplit(served.proxy_url)
    limits = FrontDoorLimits(header_timeout_s=HEADER_TIMEOUT_S, linger_s=HANG_S)
    with front_door_thread((proxy.hostname, proxy.port), "127.0.0.1", 0, limits) as front:
        yield f"http://127.0.0.1:{front.port}"


def test_trickled_headers_get_a_408_from_the_front_door_counted_to_ray(served, door):
    """Headers sent one byte every 0.5 s, never complete: a 408 naming `headers` once the header
    deadline has passed since the connection opened, then the connection is closed; counted
    here and in Ray's metrics agent."""
    parts = urlsplit(door)
    before, before_ray = front_door_count("headers"), ray_agent_count("headers")
    start = time.monotonic()
    with socket.create_connection((parts.hostname, parts.port), timeout=HANG_S) as sock:
        sock.sendall(f"POST /v1/nll HTTP/1.1\r\nHost: {parts.hostname}\r\n".encode())
        sock.settimeout(0.5)
        answer = b""
        while time.monotonic() - start < HANG_S and not answer:
            try:
                sock.sendall(b"X")  # a header name that never ends
                answer = sock.recv(65536)
            except TimeoutError:
                pass
            except OSError:
                break
        answer += rest_until_closed(sock, HANG_S)
        elapsed = time.monotonic() - start
    head, body = answer.split(b"\r\n\r\n", 1)
    assert head.startswith(b"HTTP/1.1 408"), answer[:300]
    error = json.loads(body)["error"]
    assert error["type"] == "timeout" and error["param"] == "headers"
    assert b"x-error-type: timeout" in head.lower() and b"x-work-dropped: true" in head.lower()
    assert elapsed >= HEADER_TIMEOUT_S
    assert front_door_count("headers") == before + 1
    deadline = time.monotonic() + HANG_S  # Ray's agent exports every few seconds
    while ray_agent_count("headers") < before_ray + 1:
        assert time.monotonic() < deadline, "the count never reached Ray's metrics agent"
        time.sleep(1)
    assert_app_answers(door)


def test_a_connection_that_sends_nothing_is_closed_at_the_deadline(served, door):
    parts = urlsplit(door)
    before = front_door_count("idle")
    start = time.monotonic()
    with socket.create_connection((parts.hostname, parts.port), timeout=HANG_S) as idle:
        answer = rest_until_closed(idle, HANG_S)
    assert answer == b"" and time.monotonic() - start >= HEADER_TIMEOUT_S
    assert front_door_count("idle") == before + 1
    assert_app_answers(door)
