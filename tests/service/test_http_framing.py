"""gateway/http_framing.py: where requests and responses begin and end, fed in pieces of every
size, and the framing it refuses to follow."""

from __future__ import annotations

import pytest

from dialscore_server.gateway.http_framing import FramingEvent, MessageFraming


def kinds(events: list[FramingEvent]) -> list[str]:
    return [e.kind for e in events]


def feed_in_pieces(framing: MessageFraming, data: bytes, piece: int) -> list[FramingEvent]:
    events: list[FramingEvent] = []
    for i in range(0, len(data), piece):
        events += framing.feed(data[i:i + piece])
    return events


PIPELINE = (
    b"GET /a HTTP/1.1\r\nHost: x\r\n\r\n"
    b"POST /b HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello"
    b"\r\n"  # an empty line between requests: skipped
    b"POST /c HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, Chunked\r\n\r\n"
    b"5;name=value\r\nhello\r\n0\r\nX-Trailer: 1\r\n\r\n"
    b"HEAD /d HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n"
)


@pytest.mark.parametrize("piece", [1, 2, 3, 7, 64, len(PIPELINE)])
def test_pipelined_requests_are_framed_whatever_the_pieces(piece):
    framing = MessageFraming("request")
    events = feed_in_pieces(framing, PIPELINE, piece)
    assert kinds(events) == ["begin", "head", "end"] * 4
    assert [e.method for e in events if e.kind == "head"] == [b"GET", b"POST", b"POST", b"HEAD"]
    assert framing.between_messages and framing.tracking


def test_a_head_ends_at_its_empty_line_and_the_next_request_begins_at_its_first_byte():
    framing = MessageFraming("request")
    assert kinds(framing.feed(b"\r\n\r\n")) == []  # empty lines do not begin a request
    assert kinds(framing.feed(b"G")) == ["begin"]
    assert kinds(framing.feed(b"ET / HTTP/1.1\r\nHost: x\r\n\r")) == []
    assert kinds(framing.feed(b"\nPOST / HTTP/1.1\r\nContent-Length: 3\r\n\r\nab")) == [
        "head", "end", "begin", "head"]
    assert kinds(framing.feed(b"c")) == ["end"]


def test_bare_lf_line_endings_are_accepted():
    framing = MessageFraming("request")
    events = framing.feed(b"POST / HTTP/1.1\nTransfer-Encoding: chunked\n\n3\nabc\n0\n\n")
    assert kinds(events) == ["begin", "head", "end"]


def test_a_large_body_is_counted_not_scanned():
    framing = MessageFraming("request")
    size = 8_000_000
    assert kinds(framing.feed(b"POST / HTTP/1.1\r\nContent-Length: %d\r\n\r\n" % size)) == ["begin", "head"]
    chunk = b"x" * 65536
    events = []
    for _ in range(size // len(chunk)):
        events += framing.feed(chunk)
    assert events == []
    assert kinds(framing.feed(b"x" * (size % len(chunk)) + b"GET")) == ["end", "begin"]


def test_a_head_over_the_limit_is_followed_to_its_end_then_reported_malformed():
    framing = MessageFraming("request", max_head_bytes=1024)
    assert kinds(framing.feed(b"GET / HTTP/1.1\r\n")) == ["begin"]
    for _ in range(100):
        assert framing.feed(b"X-Pad: " + b"p" * 100 + b"\r\n") == []
    events = framing.feed(b"\r\nGET / HTTP/1.1\r\n\r\n")
    assert kinds(events) == ["malformed"] and "larger than 1024" in events[0].reason
    assert not framing.tracking and framing.feed(b"GET / HTTP/1.1\r\n\r\n") == []


@pytest.mark.parametrize("head,reason", [
    (b"Content-Length: 5\r\nTransfer-Encoding: chunked", "both"),
    (b"Transfer-Encoding: chunked, gzip", "chunked"),
    (b"Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked", "chunked"),
    (b"Content-Length: abc", "Content-Length"),
    (b"Content-Length: -1", "Content-Length"),
    (b"Content-Length: 5\r\nContent-Length: 6", "Content-Length"),
    (b"Content-Length : 5", "whitespace"),
    (b"X-A: 1\r\n Transfer-Encoding: chunked", "folding"),
])
def test_malformed_request_framing_is_reported_and_no_longer_followed(head, reason):
    framing = MessageFraming("request")
    events = framing.feed(b"POST / HTTP/1.1\r\nHost: x\r\n" + head + b"\r\n\r\nhello")
    assert kinds(events)[-1] == "malformed" and reason in events[-1].reason
    assert not framing.tracking


def test_repeated_equal_content_lengths_are_one_length():
    framing = MessageFraming("request")
    events = framing.feed(b"POST / HTTP/1.1\r\nContent-Length: 2, 2\r\nContent-Length: 2\r\n\r\nab")
    assert kinds(events) == ["begin", "head", "end"]


@pytest.mark.parametrize("body,reason", [
    (b"zz\r\n", "chunk size"),
    (b"3\r\nabcd\r\n", "longer than its size"),
    (b"1" * 20 + b"\r\n", "chunk size"),
])
def test_malformed_chunks_are_reported(body, reason):
    framing = MessageFraming("request")
    events = framing.feed(b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n" + body)
    assert kinds(events)[-1] == "malformed" and reason in events[-1].reason


def test_an_endless_chunk_size_line_is_malformed():
    framing = MessageFraming("request", max_line_bytes=100)
    framing.feed(b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5;")
    events = framing.feed(b"e" * 200)
    assert kinds(events) == ["malformed"]


def test_responses_follow_the_requests_methods_and_statuses():
    framing = MessageFraming("response")
    for method in (b"HEAD", b"GET", b"GET", b"POST", b"GET"):
        framing.expect_response_to(method)
    stream = (
        b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n"  # HEAD: no body despite the length
        b"HTTP/1.1 204 No Content\r\n\r\n"
        b"HTTP/1.1 304 Not Modified\r\nContent-Length: 10\r\n\r\n"
        b"HTTP/1.1 100 Continue\r\n\r\n"  # interim: the POST's final answer follows
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n"
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
    )
    events = feed_in_pieces(framing, stream, 5)
    assert [e.status for e in events if e.kind == "head"] == [200, 204, 304, 100, 200, 200]
    assert kinds(events).count("end") == 5


def test_a_response_without_length_ends_with_the_connection():
    framing = MessageFraming("response")
    framing.expect_response_to(b"GET")
    assert kinds(framing.feed(b"HTTP/1.0 200 OK\r\n\r\nall of it")) == ["begin", "head"]
    assert kinds(framing.feed(b" and more")) == []
    assert kinds(framing.finish()) == ["end"]


def test_a_101_makes_the_response_stream_a_tunnel():
    framing = MessageFraming("response")
    framing.expect_response_to(b"GET")
    events = framing.feed(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n\x81\x02hi")
    assert [e.status for e in events if e.kind == "head"] == [101]
    assert not framing.tracking


def test_a_status_line_without_a_status_is_malformed():
    framing = MessageFraming("response")
    assert kinds(framing.feed(b"HTTP/1.1 OK\r\n\r\n"))[-1] == "malformed"
