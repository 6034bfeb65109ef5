"""Test helper for slow-client tests that speak HTTP over a raw socket."""

from __future__ import annotations

import socket
import time


class Response:
    """One HTTP/1.1 response read off a socket: status, headers (names in lower case), body."""

    def __init__(self, status: int, headers: dict[str, str], body: bytes, raw: bytes):
        self.status, self.headers, self.body, self.raw = status, headers, body, raw

    def json(self):
        import json

        return json.loads(self.body)


def read_response(reader) -> Response:
    """The next response from `reader` (``sock.makefile("rb")``), framed by its Content-Length (or
    none: until the connection closes). The socket's timeout guards against a hang."""
    raw = status_line = reader.readline()
    assert status_line.startswith(b"HTTP/1.1 "), status_line
    headers: dict[str, str] = {}
    while (line := reader.readline()) not in (b"\r\n", b"\n", b""):
        raw += line
        name, _, value = line.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()
    length = headers.get("content-length")
    body = reader.read(int(length)) if length is not None else reader.read()
    return Response(int(status_line.split()[1]), headers, body, raw + b"\r\n" + body)


def rest_until_closed(sock: socket.socket, seconds: float) -> bytes:
    """What the server still sends before it closes the connection; fails if it has not closed
    it within `seconds` (a hang guard)."""
    answer, start = b"", time.monotonic()
    while True:
        sock.settimeout(max(0.01, seconds - (time.monotonic() - start)))
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            raise AssertionError(f"the connection was still open after {seconds:g} s") from None
        except ConnectionResetError:
            return answer
        if not chunk:
            return answer
        answer += chunk


def send_json(url: str, body: object, timeout_s: float = 120.0) -> socket.socket:
    """Open a connection to `url`'s host and port, send ``POST`` of `url`'s path with `body` as
    JSON, and return the socket without reading the answer: the test decides when the client
    leaves (``close()``) instead of a read timeout racing the server."""
    import json
    from urllib.parse import urlsplit

    where = urlsplit(url)
    payload = json.dumps(body).encode()
    sock = socket.create_connection((where.hostname, where.port), timeout=timeout_s)
    sock.sendall(f"POST {where.path or '/'} HTTP/1.1\r\nHost: {where.netloc}\r\n"
                 f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n\r\n"
                 .encode("latin-1") + payload)
    return sock
