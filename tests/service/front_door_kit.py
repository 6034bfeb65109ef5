"""What the front door's unit tests run it with: an event loop in a thread, a clock that moves
only when a test says so, and a plain HTTP/1.1 upstream (asyncio + h11) that records the bytes
it receives, so a test can wait until the front door has relayed something instead of sleeping."""

from __future__ import annotations

import asyncio
import hashlib
import json
import threading
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import h11

T = TypeVar("T")

#: How long a test waits for something that must happen before it calls it a hang.
HANG_S = 60.0


class LoopThread:
    """An asyncio event loop running in a daemon thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run `coro` on the loop and return its result."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(HANG_S)

    @contextmanager
    def running(self) -> Iterator[LoopThread]:
        self._thread.start()
        try:
            yield self
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(HANG_S)
            self.loop.close()


class ManualClock:
    """A front-door clock (``call_later``) whose time moves only in :meth:`advance`: a deadline
    passes exactly when a test says so, however slow the machine."""

    def __init__(self) -> None:
        self.now = 0.0
        self._timers: list[_ManualTimer] = []
        self._changed = threading.Condition()

    def call_later(self, delay: float, callback: Callable[[], None]) -> _ManualTimer:
        timer = _ManualTimer(self, self.now + delay, callback, asyncio.get_running_loop())
        with self._changed:
            self._timers.append(timer)
            self._changed.notify_all()
        return timer

    def armed(self) -> int:
        """Timers set and neither cancelled nor fired."""
        with self._changed:
            return self._armed()

    def _armed(self) -> int:
        return sum(1 for t in self._timers if not t.cancelled)

    def wait_until_armed(self, count: int) -> None:
        with self._changed:
            assert self._changed.wait_for(lambda: self._armed() == count, HANG_S), \
                f"{self._armed()} timers armed, expected {count}"

    def advance(self, seconds: float) -> None:
        """Move time on; run the timers now due on their loop and return once they have run."""
        with self._changed:
            self.now += seconds
            due = [t for t in self._timers if not t.cancelled and t.when <= self.now]
            self._timers = [t for t in self._timers if not t.cancelled and t.when > self.now]
        for timer in due:
            timer.loop.call_soon_threadsafe(timer.fire)
        for loop in {t.loop for t in due}:  # the callbacks above run before this
            asyncio.run_coroutine_threadsafe(asyncio.sleep(0), loop).result(HANG_S)

    def _cancelled(self) -> None:
        with self._changed:
            self._changed.notify_all()


class _ManualTimer:
    def __init__(self, clock: ManualClock, when: float, callback: Callable[[], None],
                 loop: asyncio.AbstractEventLoop):
        self.clock, self.when, self.callback, self.loop = clock, when, callback, loop
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True
        self.clock._cancelled()

    def fire(self) -> None:
        if not self.cancelled:
            self.cancelled = True
            self.callback()


#: What ``/early`` is answered, whole.
EARLY_ANSWER = (b"HTTP/1.1 413 Payload Too Large\r\ncontent-type: application/json\r\n"
                b"content-length: 40\r\nconnection: close\r\n\r\n"
                b'{"error": {"type": "payload_too_large"}}')


class RecordingUpstream:
    """A plain HTTP/1.1 server (asyncio + h11): each request is answered 200 with JSON naming its
    method, target, body size and body SHA-256. Target ``/close`` answers with
    ``connection: close`` and closes; ``/hold`` answers only after :meth:`release`; ``/early`` is
answered 413 as soon as its head has arrived (:data:`EARLY_ANSWER`: the head, then the body in a
later write, as uvicorn sends them), and the connection closed without reading the body. Framing h11
    rejects is answered 400 with an empty body, and the connection closed. It records the bytes
    each connection received."""

    def __init__(self) -> None:
        self.connections: list[_UpstreamConnection] = []
        self.changed = threading.Condition()
        self._held: list[_UpstreamConnection] = []
        self._server: asyncio.Server | None = None
        self.port = 0

    async def start(self, port: int = 0) -> None:
        """Listen on 127.0.0.1:`port` (0: a free one; see :attr:`port`)."""
        self._server = await asyncio.get_running_loop().create_server(
            lambda: _UpstreamConnection(self), "127.0.0.1", port)
        self.port = self._server.sockets[0].getsockname()[1]

    async def close(self) -> None:
        assert self._server is not None
        self._server.close()
        for connection in self.connections:
            connection.transport.close()

    def received(self) -> list[bytes]:
        """The bytes each connection received so far, in the order they opened."""
        with self.changed:
            return [bytes(c.received) for c in self.connections]

    def wait_for(self, predicate: Callable[[RecordingUpstream], bool]) -> None:
        with self.changed:
            assert self.changed.wait_for(lambda: predicate(self), HANG_S), self.received()

    def release(self) -> None:
        """Answer the requests held at ``/hold``."""
        with self.changed:
            held, self._held = self._held, []
        for connection in held:
            asyncio.run_coroutine_threadsafe(connection.release(), connection.loop).result(HANG_S)

    def _hold(self, connection: _UpstreamConnection) -> None:
        with self.changed:
            self._held.append(connection)
            self.changed.notify_all()

    def holding(self) -> int:
        with self.changed:
            return len(self._held)


class _UpstreamConnection(asyncio.Protocol):
    def __init__(self, server: RecordingUpstream):
        self.server = server
        self.http = h11.Connection(h11.SERVER)
        self.received = bytearray()
        self.request: h11.Request | None = None
        self.body = bytearray()
        self.held = False
        self.loop = asyncio.get_running_loop()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        with self.server.changed:
            self.server.connections.append(self)
            self.server.changed.notify_all()

    def data_received(self, data: bytes) -> None:
        with self.server.changed:
            self.received += data
            self.server.changed.notify_all()
        self.http.receive_data(data)
        self._process()

    def eof_received(self) -> bool:
        self.http.receive_data(b"")
        self._process()
        return True

    def _process(self) -> None:
        while not self.held and not self.transport.is_closing():
            try:
                event = self.http.next_event()
            except h11.RemoteProtocolError:
                self.transport.write(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n"
                                     b"connection: close\r\n\r\n")
                self.transport.close()
                return
            if event is h11.NEED_DATA or event is h11.PAUSED:
                return
            if isinstance(event, h11.ConnectionClosed):
                self.transport.close()
                return
            if isinstance(event, h11.Request) and event.target == b"/early":
                self._answer_early()
                return
            if isinstance(event, h11.Request):
                self.request, self.body = event, bytearray()
            elif isinstance(event, h11.Data):
                self.body += event.data
            elif isinstance(event, h11.EndOfMessage):
                assert self.request is not None
                if self.request.target == b"/hold":
                    self.held = True
                    self.server._hold(self)
                    return
                self._respond()

    def _answer_early(self) -> None:
        head, body = EARLY_ANSWER.split(b"\r\n\r\n", 1)
        self.transport.write(head + b"\r\n\r\n")
        transport = self.transport
        self.loop.call_soon(lambda: (transport.write(body), transport.close()))

    async def release(self) -> None:
        self.held = False
        self._respond()
        self._process()

    def _respond(self) -> None:
        assert self.request is not None
        payload = json.dumps({"method": self.request.method.decode(),
                              "target": self.request.target.decode(), "bytes": len(self.body),
                              "sha256": hashlib.sha256(self.body).hexdigest()}).encode()
        headers = [("content-type", "application/json"), ("content-length", str(len(payload)))]
        if self.request.target == b"/close":
            headers.append(("connection", "close"))
        out = self.http.send(h11.Response(status_code=200, headers=headers)) or b""
        if self.request.method != b"HEAD":
            out += self.http.send(h11.Data(data=payload)) or b""
        out += self.http.send(h11.EndOfMessage()) or b""
        self.transport.write(out)
        if self.http.our_state is h11.MUST_CLOSE:
            self.transport.close()
        else:
            self.http.start_next_cycle()
