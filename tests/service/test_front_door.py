"""The front door (gateway/front_door.py) on loopback, without Ray, in front of a plain HTTP/1.1
upstream (front_door_kit.py). Its clock is a :class:`ManualClock`: a header deadline passes when a
test advances it, never because the machine was slow, and a test waits for the upstream to have
received bytes (or for a timer to be armed) rather than sleeping. Through the real app:
tests/service/test_slow_clients.py; the drain on SIGTERM in the container image:
tests/deploy/test_image.py."""

from __future__ import annotations

import asyncio
import hashlib
import json
import socket
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from dialscore_server.metric_recording import REGISTRY
from dialscore_server.gateway.front_door import FrontDoor, FrontDoorLimits
from front_door_kit import EARLY_ANSWER, HANG_S, LoopThread, ManualClock, RecordingUpstream
from raw_socket import read_response, rest_until_closed

DEADLINE_S = 10.0
CAP = 2


@dataclass
class Setup:
    door: FrontDoor
    clock: ManualClock
    upstream: RecordingUpstream
    thread: LoopThread

    def connect(self) -> socket.socket:
        return socket.create_connection(("127.0.0.1", self.door.port), timeout=HANG_S)

    def wait_open(self, count: int) -> None:
        """Wait until the front door has seen exactly `count` client connections open."""
        import time

        deadline = time.monotonic() + HANG_S
        while self.door.open_connections != count:
            assert time.monotonic() < deadline, self.door.open_connections
            time.sleep(0.01)


@pytest.fixture()
def setup() -> Iterator[Setup]:
    with LoopThread().running() as thread:
        upstream = RecordingUpstream()
        thread.run(upstream.start())
        clock = ManualClock()
        door = FrontDoor(("127.0.0.1", upstream.port),
                         FrontDoorLimits(header_timeout_s=DEADLINE_S, max_connections=CAP,
                                         linger_s=HANG_S),
                         clock=clock)
        thread.run(door.start("127.0.0.1", 0))
        try:
            yield Setup(door, clock, upstream, thread)
        finally:
            thread.run(door.close())
            thread.run(upstream.close())


def count(kind: str) -> float:
    return REGISTRY.get_sample_value("dialscore_slow_clients_total", {"kind": kind}) or 0.0


def get(target: str) -> bytes:
    return f"GET {target} HTTP/1.1\r\nHost: x\r\n\r\n".encode()


def described(response) -> dict:
    assert response.status == 200, response.raw[:300]
    return response.json()


def test_kept_alive_and_pipelined_requests_are_relayed_with_their_bodies(setup):
    with setup.connect() as sock, sock.makefile("rb") as reader:
        sock.sendall(get("/one"))
        assert described(read_response(reader))["target"] == "/one"
        sock.sendall(get("/two")
                     + b"POST /three HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello"
                     + b"POST /four HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                     + b"3;ext=1\r\nhel\r\n2\r\nlo\r\n0\r\nX-Trailer: t\r\n\r\n"
                     + get("/five"))
        answers = [described(read_response(reader)) for _ in range(4)]
    assert [a["target"] for a in answers] == ["/two", "/three", "/four", "/five"]
    hello = hashlib.sha256(b"hello").hexdigest()
    assert [(a["bytes"], a["sha256"]) for a in answers[1:3]] == [(5, hello), (5, hello)]
    assert len(setup.upstream.received()) == 1  # one upstream connection for all of them


@pytest.mark.parametrize("chunked", [False, True])
def test_an_8_mb_body_is_relayed_intact(setup, chunked):
    body = hashlib.sha256(b"seed").digest() * 250_000  # 8,000,000 bytes
    with setup.connect() as sock, sock.makefile("rb") as reader:
        if chunked:
            sock.sendall(b"POST /big HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
            for i in range(0, len(body), 65536):
                piece = body[i:i + 65536]
                sock.sendall(b"%x\r\n%s\r\n" % (len(piece), piece))
            sock.sendall(b"0\r\n\r\n")
        else:
            sock.sendall(b"POST /big HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
        answer = described(read_response(reader))
        sock.sendall(get("/after"))  # the connection is still in step
        assert described(read_response(reader))["target"] == "/after"
    assert answer["bytes"] == len(body) and answer["sha256"] == hashlib.sha256(body).hexdigest()


def test_the_upstream_closing_closes_the_clients_connection(setup):
    with setup.connect() as sock, sock.makefile("rb") as reader:
        sock.sendall(get("/close"))
        assert described(read_response(reader))["target"] == "/close"
        assert rest_until_closed(sock, HANG_S) == b""


#: Tries of the early answer below: one lost answer fails the test.
EARLY_TRIES = 20


def test_an_answer_sent_before_the_body_is_relayed_though_the_upstream_resets(setup):
    """The upstream answers once the head has arrived and closes without reading the 4 MB body
    the client goes on sending: its kernel resets the connection, and the front door's writes
    to it fail. The answer it had sent still reaches the client whole, every time (an asyncio
    transport would drop it, unread, with the failed write: about one try in three here).

    The client reads the answer's end (the front door's FIN) while the front door is still
    lingering, reading the rest of the body: each try waits for that connection to be gone, so
    that lingering tries never add up past the connection cap, however slowly the front door
    drains them."""
    body = b"x" * (4 << 20)
    for _ in range(EARLY_TRIES):
        with setup.connect() as sock:
            sock.sendall(b"POST /early HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body))
            sock.sendall(body)  # read and discarded by the front door once it has answered
            sock.shutdown(socket.SHUT_WR)
            assert rest_until_closed(sock, HANG_S) == EARLY_ANSWER
        setup.wait_open(0)


def test_malformed_framing_is_answered_by_the_upstream(setup):
    with setup.connect() as sock, sock.makefile("rb") as reader:
        sock.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\nhello")
        answer = read_response(reader)
        assert answer.status == 400 and answer.body == b"" and "x-error-type" not in answer.headers
        assert rest_until_closed(sock, HANG_S) == b""


def test_late_headers_of_a_first_request_get_a_408_and_are_counted(setup):
    before = count("headers")
    partial = b"POST /v1/nll HTTP/1.1\r\nHost: x\r\nContent-Le"
    with setup.connect() as sock, sock.makefile("rb") as reader:
        sock.sendall(partial)
        setup.upstream.wait_for(lambda u: u.received() == [partial])  # relayed, so begun
        setup.clock.advance(DEADLINE_S)
        answer = read_response(reader)
        assert rest_until_closed(sock, HANG_S) == b""
    assert answer.status == 408, answer.raw
    assert answer.json()["error"] == {
        "type": "timeout", "param": "headers",
        "message": f"the request headers did not arrive within {DEADLINE_S:g} s"}
    assert answer.headers["x-error-type"] == "timeout" and answer.headers["x-work-dropped"] == "true"
    assert answer.headers["content-type"] == "application/json"
    assert answer.headers["connection"] == "close"
    assert count("headers") == before + 1


def test_a_connection_that_sends_nothing_is_closed_without_an_answer(setup):
    before = count("idle")
    with setup.connect() as sock:
        setup.clock.wait_until_armed(1)
        setup.clock.advance(DEADLINE_S)
        assert rest_until_closed(sock, HANG_S) == b""
    assert count("idle") == before + 1


def test_a_head_complete_before_the_deadline_is_served_and_a_kept_alive_connection_has_none(setup):
    before = count("headers") + count("idle")
    with setup.connect() as sock, sock.makefile("rb") as reader:
        setup.clock.wait_until_armed(1)
        setup.clock.advance(DEADLINE_S * 0.99)
        sock.sendall(get("/in-time"))
        assert described(read_response(reader))["target"] == "/in-time"
        sock.sendall(b"POST /chunked HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                     b"4\r\nGET \r\n0\r\nX-Trailer: t\r\n\r\n"
                     b"POST /sized HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n\r\nGET ")
        assert [described(read_response(reader))["target"] for _ in range(2)] == ["/chunked", "/sized"]
        assert setup.clock.armed() == 0  # body bytes did not begin a request
        setup.clock.advance(DEADLINE_S * 100)  # idle between requests: no deadline
        sock.sendall(get("/much-later"))
        assert described(read_response(reader))["target"] == "/much-later"
    assert count("headers") + count("idle") == before


def test_a_later_request_has_the_deadline_from_its_first_byte(setup):
    before = count("headers")
    with setup.connect() as sock, sock.makefile("rb") as reader:
        sock.sendall(b"POST /first HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                     b"2\r\nhi\r\n0\r\n\r\n")
        described(read_response(reader))  # its body's end is not taken for a request's
        setup.clock.advance(DEADLINE_S * 100)
        sock.sendall(b"GET /second HTTP/1.1\r\n")
        setup.clock.wait_until_armed(1)  # armed by the first byte
        setup.clock.advance(DEADLINE_S * 0.99)
        sock.sendall(b"Host: x\r\n\r\n")
        assert described(read_response(reader))["target"] == "/second"
        sock.sendall(b"GET /third HTTP/1.1\r\n")
        setup.clock.wait_until_armed(1)
        setup.clock.advance(DEADLINE_S)
        answer = read_response(reader)
        assert answer.status == 408 and answer.json()["error"]["param"] == "headers"
        assert rest_until_closed(sock, HANG_S) == b""
    assert count("headers") == before + 1


def test_a_late_pipelined_request_gets_its_408_after_the_answers_before_it(setup):
    sent = get("/hold") + b"GET /late HTTP/1.1\r\nHost: x\r\n"
    with setup.connect() as sock, sock.makefile("rb") as reader:
        sock.sendall(sent)
        setup.upstream.wait_for(lambda u: u.received() == [sent] and u.holding() == 1)
        setup.clock.advance(DEADLINE_S)  # the late request's deadline passes while /hold waits
        setup.upstream.release()
        first, second = read_response(reader), read_response(reader)
        assert rest_until_closed(sock, HANG_S) == b""
    assert described(first)["target"] == "/hold"
    assert second.status == 408 and second.json()["error"]["param"] == "headers"


def test_connections_beyond_the_cap_get_a_503_and_earlier_ones_are_served(setup):
    before = count("connections")
    with setup.connect() as a, a.makefile("rb") as ra, setup.connect() as b, b.makefile("rb") as rb:
        setup.wait_open(CAP)
        with setup.connect() as c, c.makefile("rb") as rc:
            setup.wait_open(CAP + 1)
            c.sendall(b"POST /v1/nll HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}")
            answer = read_response(rc)
            assert rest_until_closed(c, HANG_S) == b""
        assert answer.status == 503, answer.raw
        assert answer.headers["retry-after"] == "1" and answer.headers["x-error-type"] == "overloaded"
        assert answer.json()["error"]["type"] == "overloaded"
        for sock, reader in ((a, ra), (b, rb)):
            sock.sendall(get("/admitted"))
            assert described(read_response(reader))["target"] == "/admitted"
        assert len(setup.upstream.received()) == CAP  # the refused one never reached it
    assert count("connections") == before + 1
    setup.wait_open(0)
    with setup.connect() as d, d.makefile("rb") as rd:
        d.sendall(get("/room-again"))
        assert described(read_response(rd))["target"] == "/room-again"


def test_limits_from_the_environment_name_the_variable_at_fault():
    assert FrontDoorLimits.from_environment({}) == FrontDoorLimits(10.0, 1024)
    assert FrontDoorLimits.from_environment(
        {"DIALSCORE_HEADER_TIMEOUT_S": "2.5", "DIALSCORE_MAX_CONNECTIONS": "7"}) == FrontDoorLimits(2.5, 7)
    for env, variable in (({"DIALSCORE_HEADER_TIMEOUT_S": "soon"}, "DIALSCORE_HEADER_TIMEOUT_S"),
                          ({"DIALSCORE_HEADER_TIMEOUT_S": "0"}, "DIALSCORE_HEADER_TIMEOUT_S"),
                          ({"DIALSCORE_MAX_CONNECTIONS": "1.5"}, "DIALSCORE_MAX_CONNECTIONS"),
                          ({"DIALSCORE_MAX_CONNECTIONS": "0"}, "DIALSCORE_MAX_CONNECTIONS")):
        with pytest.raises(ValueError, match=variable):
            FrontDoorLimits.from_environment(env)


def test_the_408_is_the_gateways_own_error_response():
    from dialscore_server.contract.errors import ServiceError
    from dialscore_server.contract.http_errors import error_response, error_response_bytes

    err = ServiceError("overloaded", "busy", retry_after=1)
    raw = error_response_bytes(err)
    head, body = raw.split(b"\r\n\r\n", 1)
    assert head.startswith(b"HTTP/1.1 503 Service Unavailable\r\n")
    assert body == error_response(err).body and json.loads(body)["error"]["type"] == "overloaded"
    assert b"\r\nretry-after: 1" in head.lower() and head.endswith(b"connection: close")


# ------------------------------------------------------------------ Serve's proxy down

def reserved_port() -> tuple[socket.socket, int]:
    """A loopback port bound but not listening: connecting to it is refused."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    return sock, sock.getsockname()[1]


@pytest.fixture()
def down() -> Iterator[tuple[FrontDoor, ManualClock, LoopThread, socket.socket, int]]:
    """A front door whose Serve proxy refuses connections (its port reserved, nothing listening),
    waiting for it up to 2 s by the manual clock."""
    with LoopThread().running() as thread:
        holder, port = reserved_port()
        clock = ManualClock()
        door = FrontDoor(("127.0.0.1", port),
                         FrontDoorLimits(header_timeout_s=DEADLINE_S, upstream_wait_s=2.0,
                                         linger_s=HANG_S),
                         clock=clock)
        thread.run(door.start("127.0.0.1", 0))
        try:
            yield door, clock, thread, holder, port
        finally:
            holder.close()
            thread.run(door.close())


def wait_for_failures(door: FrontDoor, clock: ManualClock, n: int) -> None:
    """Wait until `n` connections to the proxy have failed and the retry timer is the only one
    armed (the request's head is complete: its deadline is off)."""
    import time

    deadline = time.monotonic() + HANG_S
    while not (door.upstream_failures >= n and clock.armed() == 1):
        assert time.monotonic() < deadline, (door.upstream_failures, clock.armed())
        time.sleep(0.01)


def test_a_request_waits_while_serves_proxy_refuses_and_is_answered_once_it_is_back(down):
    door, clock, thread, holder, port = down
    with socket.create_connection(("127.0.0.1", door.port), timeout=HANG_S) as sock, \
            sock.makefile("rb") as reader:
        sock.sendall(get("/waited"))
        wait_for_failures(door, clock, 1)
        clock.advance(0.25)                   # tried again: still refused
        wait_for_failures(door, clock, 2)
        holder.close()                        # a new proxy listens on the port
        upstream = RecordingUpstream()
        thread.run(upstream.start(port))
        try:
            clock.advance(0.5)
            assert described(read_response(reader))["target"] == "/waited"
        finally:
            thread.run(upstream.close())
    assert door.upstream_failures == 2


def test_a_request_gets_no_answer_once_the_front_door_has_waited_upstream_wait_s(down):
    door, clock, *_ = down
    with socket.create_connection(("127.0.0.1", door.port), timeout=HANG_S) as sock:
        sock.sendall(get("/never"))
        for failures in range(1, 5):          # each wait is at most 1 s
            wait_for_failures(door, clock, failures)   # still waiting: a retry timer armed
            clock.advance(1.0)
        assert rest_until_closed(sock, HANG_S) == b""
    # Waits of 0.25, 0.5, 1 and the 0.25 left of the 2 s: the fifth refusal closes it.
    assert door.upstream_failures == 5


def start_drain(setup: Setup, grace_s: float):
    """The front door's drain, started on its loop; its future gives the drain's count."""
    return asyncio.run_coroutine_threadsafe(setup.door.drain(grace_s), setup.thread.loop)


def test_draining_closes_idle_connections_refuses_new_ones_and_answers_the_one_in_flight(setup):
    head = b"POST /slow-body HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n"
    with setup.connect() as idle, idle.makefile("rb") as idle_reader, \
            setup.connect() as busy, busy.makefile("rb") as reader:
        idle.sendall(get("/one"))
        assert described(read_response(idle_reader))["target"] == "/one"
        busy.sendall(head + b"hello")  # half of its body: in flight until the rest comes
        setup.upstream.wait_for(lambda up: any(r.endswith(b"hello") for r in up.received()))
        port = setup.door.port
        drained = start_drain(setup, DEADLINE_S)
        assert rest_until_closed(idle, HANG_S) == b""  # closed at once, nothing was owed to it
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", port), timeout=HANG_S)
        assert not drained.done()
        busy.sendall(b"world")
        answer = described(read_response(reader))
        assert (answer["target"], answer["bytes"]) == ("/slow-body", 10)
        assert rest_until_closed(busy, HANG_S) == b""  # ended after its answer
    assert drained.result(HANG_S) == 1
    assert setup.door.open_connections == 0


def test_what_is_still_in_flight_after_the_grace_period_is_closed_without_an_answer(setup):
    with setup.connect() as busy:
        busy.sendall(b"POST /never-ends HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nhello")
        setup.upstream.wait_for(lambda up: any(r.endswith(b"hello") for r in up.received()))
        drained = start_drain(setup, DEADLINE_S)
        setup.clock.wait_until_armed(1)  # the grace period's timer
        assert not drained.done()
        setup.clock.advance(DEADLINE_S)
        assert rest_until_closed(busy, HANG_S) == b""
    assert drained.result(HANG_S) == 1
