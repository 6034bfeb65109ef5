"""Where HTTP/1.1 messages begin and end in a byte stream (RFC 9112 framing), read incrementally.

:class:`MessageFraming` follows one direction of one connection, requests or responses, as bytes
arrive in pieces of any size, and reports four events: a message's first byte (``begin``), its
head complete (``head``, with the request's method or the response's status), its end (``end``)
and framing it cannot follow (``malformed``). It reads only what framing needs: the start line,
``Content-Length`` and ``Transfer-Encoding``, chunk sizes and the empty lines that end a head or
a trailer section. It never parses a target, a header's meaning or a body, and it changes nothing:
the caller forwards the bytes as they came.

Rules (RFC 9112, section 6):

* Empty lines before a message are skipped (they do not begin one). Lines end in CRLF or LF.
* A request's body is chunked when ``Transfer-Encoding``'s last coding is ``chunked``, else
  ``Content-Length`` bytes long, else empty. A response to ``HEAD``, a 204, a 304 and a 1xx have
  no body; else chunked as a request, else ``Content-Length`` bytes, else up to the connection's
  end (:meth:`MessageFraming.finish`). A 1xx other than 101 is interim: the final response follows.
* After a 101 (or a 2xx to ``CONNECT``) the connection is no longer HTTP: the response side stops
  tracking, and the caller stops the request side (:meth:`MessageFraming.stop`).
* ``malformed``, after which the stream is no longer tracked: a request with both
  ``Content-Length`` and ``Transfer-Encoding``, or whose codings do not end in exactly one
  ``chunked``; a ``Content-Length`` that is not digits, or several that differ; obsolete line
  folding; whitespace between a framing field's name and its colon; a chunk size that is not
  hexadecimal; a chunk not followed by an empty line; a response status line without a
  three-digit status; a chunk-size line over ``max_line_bytes``; trailers over
  ``max_head_bytes``. A head over ``max_head_bytes`` is still followed to its end (so the caller
  learns when it is complete), then reported ``malformed``, since its fields were not kept.

Anything not listed (a request line's form, other fields, a body's content) is left to the
server that receives the bytes.
"""

from __future__ import annotations

import re
from collections import deque
from dataclasses import dataclass
from typing import Literal

Role = Literal["request", "response"]
EventKind = Literal["begin", "head", "end", "malformed"]

#: The empty line that ends a head: LF then an optional CR then LF (the head's first line is
#: never empty, since empty lines before a message are skipped).
_END_OF_HEAD = re.compile(rb"\n\r?\n")
_HEX = frozenset(b"0123456789abcdefABCDEF")

# States.
_BETWEEN, _HEAD, _LENGTH, _CHUNK_SIZE, _CHUNK_DATA, _CHUNK_END, _TRAILERS, _UNTIL_CLOSE, _OFF = range(9)


@dataclass(frozen=True)
class FramingEvent:
    """One event of a stream: `method` is set on a request's ``head``, `status` on a response's
    ``head``, `reason` on ``malformed``."""

    kind: EventKind
    method: bytes = b""
    status: int = 0
    reason: str = ""


BEGIN = FramingEvent("begin")
END = FramingEvent("end")


class _Malformed(Exception):
    pass


class MessageFraming:
    """The framing of the messages of one direction of one HTTP/1.1 connection (see the module
    docstring). Feed it the bytes in order; each :meth:`feed` returns the events those bytes
    completed, in order. After ``malformed``, a tunnel or :meth:`stop`, :attr:`tracking` is False
    and :meth:`feed` returns nothing.

    A response stream needs the method of each request it answers, in order
    (:meth:`expect_response_to`); without one, a response is framed as an answer to ``GET``."""

    def __init__(self, role: Role, *, max_head_bytes: int = 65536, max_line_bytes: int = 8192):
        self.role = role
        self.max_head_bytes = max_head_bytes
        self.max_line_bytes = max_line_bytes
        self._state = _BETWEEN
        self._head = bytearray()  # the head so far; only its last 2 bytes once over the limit
        self._head_oversized = False
        self._line = bytearray()  # a chunk-size or trailer line so far
        self._trailer_bytes = 0
        self._remaining = 0  # body or chunk bytes still to come
        self._methods: deque[bytes] = deque()

    @property
    def tracking(self) -> bool:
        """Whether the stream is still followed."""
        return self._state != _OFF

    @property
    def between_messages(self) -> bool:
        """True when no byte of the next message has arrived (and the stream is tracked)."""
        return self._state == _BETWEEN

    def expect_response_to(self, method: bytes) -> None:
        """Response stream: the next request still unanswered has this method."""
        self._methods.append(method)

    def stop(self) -> None:
        """Stop following the stream (the connection became a tunnel)."""
        self._state = _OFF

    def finish(self) -> list[FramingEvent]:
        """The stream ended (the sender closed): ends a body framed by the connection's end."""
        if self._state == _UNTIL_CLOSE:
            self._state = _BETWEEN
            return [END]
        return []

    def feed(self, data: bytes) -> list[FramingEvent]:
        """Follow `data`, the next bytes of the stream; return the events they complete."""
        events: list[FramingEvent] = []
        try:
            pos, size = 0, len(data)
            while pos < size and self._state != _OFF:
                state = self._state
                if state == _BETWEEN:
                    while pos < size and data[pos] in b"\r\n":
                        pos += 1
                    if pos < size:
                        events.append(BEGIN)
                        self._state = _HEAD
                elif state == _HEAD:
                    pos = self._read_head(data, pos, events)
                elif state == _LENGTH or state == _CHUNK_DATA:
                    taken = min(self._remaining, size - pos)
                    self._remaining -= taken
                    pos += taken
                    if self._remaining == 0:
                        if state == _LENGTH:
                            self._end(events)
                        else:
                            self._state = _CHUNK_END
                elif state == _UNTIL_CLOSE:
                    pos = size
                else:
                    line, pos = self._read_line(data, pos)
                    if line is not None:
                        self._on_line(line, events)
        except _Malformed as exc:
            self._state = _OFF
            events.append(FramingEvent("malformed", reason=str(exc)))
        return events

    # The head.

    def _read_head(self, data: bytes, pos: int, events: list[FramingEvent]) -> int:
        before = len(self._head)
        self._head += data[pos:]
        found = _END_OF_HEAD.search(self._head, max(0, before - 2))
        if found is None:
            if len(self._head) > self.max_head_bytes:
                self._head_oversized = True
            if self._head_oversized:
                del self._head[:-2]
            return len(data)
        used = found.end() - before
        head = bytes(self._head[:found.end()])
        oversized = self._head_oversized
        self._head.clear()
        self._head_oversized = False
        if oversized:
            raise _Malformed(f"head larger than {self.max_head_bytes} bytes")
        self._on_head(head, events)
        return pos + used

    def _on_head(self, head: bytes, events: list[FramingEvent]) -> None:
        lines = [line[:-1] if line.endswith(b"\r") else line for line in head.split(b"\n")]
        while lines and not lines[-1]:
            lines.pop()
        start, fields = lines[0], lines[1:]
        lengths, codings = _framing_fields(fields)
        if self.role == "request":
            events.append(FramingEvent("head", method=start.split(b" ", 1)[0]))
            if codings:
                if lengths:
                    raise _Malformed("both Content-Length and Transfer-Encoding")
                if codings[-1] != b"chunked" or codings.count(b"chunked") != 1:
                    raise _Malformed("Transfer-Encoding does not end in one `chunked`")
                self._state = _CHUNK_SIZE
            elif lengths:
                self._body_of_length(lengths, events)
            else:
                self._end(events)
            return
        status = _status(start)
        events.append(FramingEvent("head", status=status))
        if status == 101:
            self._state = _OFF
        elif status < 200:
            self._state = _BETWEEN  # interim: the final response follows
        else:
            method = self._methods.popleft() if self._methods else b"GET"
            if method == b"CONNECT" and status < 300:
                self._state = _OFF
            elif method == b"HEAD" or status in (204, 304):
                self._end(events)
            elif codings:
                self._state = _CHUNK_SIZE if codings[-1] == b"chunked" else _UNTIL_CLOSE
            elif lengths:
                self._body_of_length(lengths, events)
            else:
                self._state = _UNTIL_CLOSE

    def _body_of_length(self, lengths: list[bytes], events: list[FramingEvent]) -> None:
        if not all(v.isdigit() for v in lengths) or len(set(lengths)) != 1:
            raise _Malformed(f"invalid Content-Length {b', '.join(lengths).decode('latin-1')!r}")
        self._remaining = int(lengths[0])
        if self._remaining == 0:
            self._end(events)
        else:
            self._state = _LENGTH

    # Chunked bodies.

    def _read_line(self, data: bytes, pos: int) -> tuple[bytes | None, int]:
        newline = data.find(b"\n", pos)
        if newline < 0:
            self._line += data[pos:]
            self._check_line_size()
            return None, len(data)
        self._line += data[pos:newline]
        self._check_line_size()
        line = bytes(self._line)
        self._line.clear()
        return (line[:-1] if line.endswith(b"\r") else line), newline + 1

    def _check_line_size(self) -> None:
        if self._state == _TRAILERS:
            if self._trailer_bytes + len(self._line) > self.max_head_bytes:
                raise _Malformed(f"trailers larger than {self.max_head_bytes} bytes")
        elif len(self._line) > self.max_line_bytes:
            raise _Malformed(f"chunk-size line longer than {self.max_line_bytes} bytes")

    def _on_line(self, line: bytes, events: list[FramingEvent]) -> None:
        if self._state == _CHUNK_SIZE:
            digits = line.split(b";", 1)[0].strip(b" \t")
            if not digits or len(digits) > 16 or not _HEX.issuperset(digits):
                raise _Malformed(f"invalid chunk size {line[:40].decode('latin-1')!r}")
            self._remaining = int(digits, 16)
            if self._remaining == 0:
                self._state = _TRAILERS
                self._trailer_bytes = 0
            else:
                self._state = _CHUNK_DATA
        elif self._state == _CHUNK_END:
            if line:
                raise _Malformed("chunk data longer than its size")
            self._state = _CHUNK_SIZE
        elif line:  # a trailer field
            self._trailer_bytes += len(line) + 2
        else:
            self._end(events)

    def _end(self, events: list[FramingEvent]) -> None:
        self._state = _BETWEEN
        events.append(END)


def _framing_fields(fields: list[bytes]) -> tuple[list[bytes], list[bytes]]:
    """The Content-Length values and the transfer codings (lower case) of a head's field lines."""
    lengths: list[bytes] = []
    codings: list[bytes] = []
    for line in fields:
        if line[:1] in (b" ", b"\t"):
            raise _Malformed("obsolete line folding")
        name, colon, value = line.partition(b":")
        if not colon:
            continue  # not a field framing depends on; the receiving server judges it
        lowered = name.lower()
        stripped = lowered.strip(b" \t")
        if stripped != lowered and stripped in (b"content-length", b"transfer-encoding"):
            raise _Malformed(f"whitespace around the field name {name.decode('latin-1')!r}")
        if lowered == b"content-length":
            lengths.extend(v.strip(b" \t") for v in value.split(b","))
        elif lowered == b"transfer-encoding":
            codings.extend(c for v in value.split(b",") if (c := v.strip(b" \t").lower()))
    return lengths, codings


def _status(start_line: bytes) -> int:
    parts = start_line.split(b" ", 2)
    if (len(parts) < 2 or not parts[0].startswith(b"HTTP/") or len(parts[1]) != 3
            or not parts[1].isdigit()):
        raise _Malformed(f"invalid status line {start_line[:40].decode('latin-1')!r}")
    return int(parts[1])
