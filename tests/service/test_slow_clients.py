"""Slow clients on the real app: a body trickled byte by byte is cut off with a 408 once
body_timeout_s has passed, and counted; headers trickled to Serve's proxy get a 408 once the
proxy's header deadline has passed (3 s in this session, see conftest.py); a prompt client on the
same app is unaffected."""

from __future__ import annotations

import json
import socket
import time
from urllib.parse import urlsplit

import httpx
import pytest

from raw_socket import read_until_closed
from serve_apps import ONE_THREAD, app_args, deploy_app

pytestmark = [pytest.mark.serve, pytest.mark.slow]


def slow_counter(url: str) -> float:
    text = httpx.get(f"{url}/metrics", timeout=30).text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith('dialscore_slow_clients_total{kind="body"}'))


def test_a_trickled_body_gets_a_408_after_body_timeout(served, stand_ins):
    args = app_args(stand_ins, models=[{"name": "dialogpt-medium", "serving": ONE_THREAD}],
                    body_timeout_s=1.5)
    with deploy_app(served, "slowbody", args) as app:
        parts = urlsplit(app.url)
        before = slow_counter(app.url)
        with socket.create_connection((parts.hostname, parts.port), timeout=30) as sock:
            sock.sendall((f"POST {parts.path}/v1/nll HTTP/1.1\r\nHost: {parts.hostname}\r\n"
                          "Content-Type: application/json\r\nContent-Length: 100\r\n\r\n").encode())
            start = time.monotonic()
            sock.settimeout(0.5)
            answer = b""
            while time.monotonic() - start < 20 and b"\r\n\r\n" not in answer:
                try:
                    sock.sendall(b" ")  # one byte every 0.5 s: 100 bytes would take 50 s
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
            sock.settimeout(5)
            try:  # the rest of the answer (the error body), until the server closes
                while chunk := sock.recv(65536):
                    answer += chunk
            except (TimeoutError, OSError):
                pass
        head = answer.split(b"\r\n", 1)[0]
        assert head.startswith(b"HTTP/1.1 408"), answer[:300]
        assert b"x-error-type: timeout" in answer.lower() and b"body_timeout_s" in answer
        assert elapsed < 10
        assert slow_counter(app.url) == before + 1
        ok = httpx.post(f"{app.url}/v1/nll", json={"model": "dialogpt-medium", "items": [
            {"context": ["Hi"], "target": "Hello"}]}, timeout=60)
        assert ok.status_code == 200, ok.text[:300]


def test_trickled_headers_get_a_408_from_the_proxy(served):
    """Through Ray Serve's real proxy (the guard installed by RAY_SERVE_HTTP_PROXY_CALLBACK_...):
    headers sent one byte every 0.5 s are cut off with a 408 naming `headers`; a connection that
    sends nothing is closed; the app keeps answering."""
    parts = urlsplit(served.url)
    with socket.create_connection((parts.hostname, parts.port), timeout=30) as sock:
        sock.sendall(f"POST /v1/nll HTTP/1.1\r\nHost: {parts.hostname}\r\n".encode())
        start, answer = time.monotonic(), b""
        sock.settimeout(0.5)
        while time.monotonic() - start < 20 and not answer:
            try:
                sock.sendall(b"X")  # a header name that never ends
                answer = sock.recv(65536)
            except TimeoutError:
                pass
            except OSError:
                break
        rest, _ = read_until_closed(sock, 5)
        answer += rest
        elapsed = time.monotonic() - start
    assert answer.startswith(b"HTTP/1.1 408"), answer[:300]
    error = json.loads(answer.split(b"\r\n\r\n", 1)[1])["error"]
    assert error["type"] == "timeout" and error["param"] == "headers"
    assert b"x-error-type: timeout" in answer.lower()
    assert 2 < elapsed < 15
    with socket.create_connection((parts.hostname, parts.port), timeout=30) as idle:
        answer, waited = read_until_closed(idle, 15)
    assert answer == b"" and waited < 10  # closed without a word, at the deadline
    ok = httpx.post(f"{served.url}/v1/nll", json={"model": "dialogpt-medium", "items": [
        {"context": ["Hi"], "target": "Hello"}]}, timeout=60)
    assert ok.status_code == 200, ok.text[:300]
