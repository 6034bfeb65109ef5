"""Test helper for slow-client tests that speak HTTP over a raw socket."""

from __future__ import annotations

import socket
import time


def read_until_closed(sock: socket.socket, seconds: float) -> tuple[bytes, float]:
    """What the server sends until it closes the connection (or `seconds` pass), and how long
    that took."""
    start, answer = time.monotonic(), b""
    sock.settimeout(0.2)
    while time.monotonic() - start < seconds:
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            continue
        if not chunk:
            break
        answer += chunk
    return answer, time.monotonic() - start
