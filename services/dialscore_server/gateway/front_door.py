"""The embedded default's front door: a TCP server on the public address that relays every
connection, byte for byte, to Serve's HTTP proxy on a private loopback port, and enforces the two
slow-client limits that Serve's proxy cannot be configured with.

On a cluster there is no front door: an ingress in front of Serve enforces the same limits
(deployments/kuberay/front-proxy.yaml). Locally there is no ingress, so :func:`serve_locally`
(gateway/embedded.py) puts this in front of Serve's proxy.

The limits (:class:`FrontDoorLimits`; ``DIALSCORE_HEADER_TIMEOUT_S`` and
``DIALSCORE_MAX_CONNECTIONS`` in :meth:`FrontDoorLimits.from_environment`):

* **Header deadline** (`header_timeout_s`, default 10). A request's head must be complete within
  this many seconds of the connection's opening (its first request) or of the request's first
  byte (a later request on a kept-alive connection; empty lines before a request do not count as
  its first byte). A request begun and not complete in time is answered **408** ``timeout``
  (param ``headers``; ``x-work-dropped: true``, as every 408 of the service: nothing was
  computed), after the answers to the requests before it on the connection, and the connection
  is closed. A connection that sent nothing in that time is closed without an answer. A
  kept-alive connection with no request begun has no deadline here: Serve's proxy closes it
  after its keep-alive timeout, and the front door then closes the client's side.
* **Connection cap** (`max_connections`, default 1024). A connection opened while that many
  client connections are open to the front door (refused ones included, until they close) is
  never relayed: its first request, once its head is complete, is answered **503**
  ``overloaded`` with ``Retry-After: 1``, and the connection is closed. Connections opened before
  are served as usual.

**Waiting for Serve's proxy.** A connection to Serve's proxy that is refused (the proxy process
died, and Serve's controller has not started a new one yet) is tried again after 0.25 s, then
after delays doubling up to 1 s, until the connection has waited `upstream_wait_s` (default 60)
in all; the client's bytes are held meanwhile, so its request is answered late, not failed. Only
after that is the client's connection closed without an answer. (Serve's proxy down means about
6 s of missed health checks plus a new proxy's start: gateway/embedded.py, ``PROXY_HEALTH_ENV``.)
The waits are timed by the front door's clock.

**Draining** (:meth:`FrontDoor.drain`, what `dialscore serve` does on SIGTERM): the front door
stops listening, closes the connections with nothing in flight, serves the requests in flight to
their answers and ends each connection after its last one, for at most a grace period; only then
does Serve stop behind it (gateway/embedded.py).

Each refusal is counted in ``dialscore_slow_clients_total{kind="headers"|"idle"|"connections"}``
(metrics.py). Answers are built by the one error mapping (contract/http_errors.py). After
an answer the front door stops sending (a FIN), reads and discards what the client still sends
for at most `linger_s` (:class:`FrontDoorLimits`), then closes, so that the client reads the answer rather than a reset.

Requests are followed with gateway/http_framing.py (heads, Content-Length, chunked bodies,
pipelining); so are responses, to know which requests are answered. Bytes are relayed unchanged
as they arrive, in both directions, with back-pressure: a side whose send buffer is full stops
the other side's reading. Framing the front door cannot follow (``malformed``) is relayed all
the same, for Serve's proxy to answer; the connection is then relayed without limits until it
closes. After a 101 (an upgrade) the connection is relayed as a tunnel. Either side closing
closes the other (a client's half-close is passed on as a half-close). Serve's proxy answering
before a body has all arrived, then closing (a 413), is relayed whole though it resets the
connection: its side is a gateway/upstream_link.py link, which goes on reading after its writes
fail; what the client still sends is then discarded.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Literal, Protocol

from dialscore_server.contract.errors import ServiceError
from dialscore_server.contract.http_errors import error_response_bytes
from dialscore_server.gateway.http_framing import MessageFraming
from dialscore_server.gateway.upstream_link import UpstreamLink, open_link

logger = logging.getLogger("dialscore.front_door")

HEADER_TIMEOUT_VARIABLE = "DIALSCORE_HEADER_TIMEOUT_S"
MAX_CONNECTIONS_VARIABLE = "DIALSCORE_MAX_CONNECTIONS"

Refusal = Literal["headers", "idle", "connections"]

#: Client bytes held while the connection to Serve's proxy is being opened; beyond this the
#: client's reading pauses until it is open.
_HELD_BEFORE_CONNECT = 256 * 1024
#: The first and the longest delay before connecting to Serve's proxy again after a refusal.
UPSTREAM_RETRY_FIRST_S, UPSTREAM_RETRY_MAX_S = 0.25, 1.0


@dataclass(frozen=True)
class FrontDoorLimits:
    """The front door's limits (see the module docstring)."""

    header_timeout_s: float = 10.0
    max_connections: int = 1024
    #: How long a connection lingers after an answer the front door ended it with (a FIN sent,
    #: what the client still sends read and discarded) before it is closed: a client still
    #: sending a body the service refused then reads the answer rather than a reset.
    linger_s: float = 2.0
    #: How long a client connection waits, in all, for Serve's proxy to accept the front door's
    #: connection (see the module docstring); 0: close it at the first refusal.
    upstream_wait_s: float = 60.0

    def __post_init__(self) -> None:
        if not (self.linger_s >= 0 and math.isfinite(self.linger_s)):
            raise ValueError(f"linger_s must be a finite number >= 0, got {self.linger_s!r}")
        if not (self.upstream_wait_s >= 0 and math.isfinite(self.upstream_wait_s)):
            raise ValueError(f"upstream_wait_s must be a finite number >= 0, "
                             f"got {self.upstream_wait_s!r}")
        if not (self.header_timeout_s > 0 and math.isfinite(self.header_timeout_s)):
            raise ValueError(f"header_timeout_s must be a finite number > 0, "
                             f"got {self.header_timeout_s!r}")
        if self.max_connections < 1:
            raise ValueError(f"max_connections must be >= 1, got {self.max_connections!r}")

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] = os.environ) -> FrontDoorLimits:
        """The limits ``DIALSCORE_HEADER_TIMEOUT_S`` and ``DIALSCORE_MAX_CONNECTIONS`` set (each
        unset or empty one at its default). A value that is not a number, or out of range, is a
        ValueError naming the variable."""
        values: dict[str, float | int] = {}
        for variable, field, kind in ((HEADER_TIMEOUT_VARIABLE, "header_timeout_s", float),
                                      (MAX_CONNECTIONS_VARIABLE, "max_connections", int)):
            raw = environ.get(variable, "").strip()
            if not raw:
                continue
            try:
                values[field] = kind(raw)
                cls(**{field: values[field]})  # type: ignore[arg-type]
            except ValueError as exc:
                wanted = "an integer" if kind is int else "a number"
                reason = str(exc) if field in str(exc) else f"not {wanted}"
                raise ValueError(f"{variable}={raw!r}: {reason}") from None
        return cls(**values)  # type: ignore[arg-type]


class Timer(Protocol):
    def cancel(self) -> None: ...


class Clock(Protocol):
    """What the header deadlines are timed by: ``call_later(delay, callback)`` runs `callback` on
    the front door's event loop once `delay` seconds have passed, unless the returned timer is
    cancelled first. The event loop itself is one (the default)."""

    def call_later(self, delay: float, callback: Callable[[], None]) -> Timer: ...


def count_refusal(kind: Refusal) -> None:
    """Count a refusal in ``dialscore_slow_clients_total`` (metrics.py)."""
    from dialscore_server import metrics

    metrics.SLOW_CLIENTS.labels(kind).inc()


class FrontDoor:
    """The front door (see the module docstring), relaying to `upstream` (host, port).

    Use :meth:`start` and :meth:`close` on one event loop, or :func:`front_door_thread`. `clock`
    times the header deadlines (default: the event loop); `on_refusal` is called with each
    refusal's kind before the client learns of it (default: :func:`count_refusal`)."""

    def __init__(self, upstream: tuple[str, int], limits: FrontDoorLimits = FrontDoorLimits(), *,
                 clock: Clock | None = None, on_refusal: Callable[[Refusal], None] = count_refusal):
        self.upstream = upstream
        self.limits = limits
        self.on_refusal = on_refusal
        self._clock = clock
        self._server: asyncio.Server | None = None
        self._open: set[_Connection] = set()
        #: Connections to Serve's proxy that failed (each try counts), since the start.
        self.upstream_failures = 0
        self.draining = False
        self._all_closed: asyncio.Event | None = None

    @property
    def clock(self) -> Clock:
        """What times the header deadlines (call on the front door's loop)."""
        return self._clock or asyncio.get_running_loop()

    @property
    def port(self) -> int:
        """The port the front door listens on (after :meth:`start`)."""
        assert self._server is not None, "not started"
        return self._server.sockets[0].getsockname()[1]

    @property
    def open_connections(self) -> int:
        """Client connections open now, refused ones included."""
        return len(self._open)

    async def start(self, host: str, port: int) -> None:
        """Listen on `host`:`port` (0: a free port, see :attr:`port`) and serve."""
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(lambda: _Connection(self), host, port)

    async def drain(self, grace_s: float) -> int:
        """Stop listening (a new connection is refused), then end the open connections as their
        requests are answered; return how many connections had a request in flight (begun and
        not answered) when draining began.

        Bytes that had reached this process's sockets when it was called are read first, so a
        request whose first bytes arrived before the drain counts as in flight. A connection
        with nothing in flight is closed at once; one with a request in flight is served until
        every request begun on it is answered (its body may still be arriving), then ended as
        after any answer (a FIN, then closed once the client closes or after `linger_s`). A
        request begun on it later is served likewise. After `grace_s` (on :attr:`clock`) the
        connections still open are closed without an answer. Returns once none is open."""
        if self._server is not None:
            self._server.close()
        # Two passes of the loop: the first polls the sockets, the second runs what it read.
        for _ in range(2):
            await asyncio.sleep(0)
        self.draining = True
        self._all_closed = asyncio.Event()
        in_flight = 0
        for connection in list(self._open):
            if connection.in_flight:
                in_flight += 1
            elif not connection.finished:
                connection.abort()
        logger.warning("front door: draining: %d connection(s) with a request in flight; new "
                       "connections are refused; at most %g s", in_flight, grace_s)
        timer = self.clock.call_later(grace_s, self._grace_passed)
        try:
            await asyncio.sleep(0)  # aborted connections' connection_lost callbacks run
            if self._open:
                await self._all_closed.wait()
        finally:
            timer.cancel()
        return in_flight

    def _grace_passed(self) -> None:
        if self._open:
            logger.warning("front door: %d connection(s) still open after the drain's grace "
                           "period: closed without an answer", len(self._open))
        for connection in list(self._open):
            connection.abort()

    def _closed(self, connection: _Connection) -> None:
        self._open.discard(connection)
        if self._all_closed is not None and not self._open:
            self._all_closed.set()

    async def close(self) -> None:
        """Stop listening and close every open connection at once."""
        if self._server is not None:
            self._server.close()
        for connection in list(self._open):
            connection.abort()
        await asyncio.sleep(0)  # their connection_lost callbacks run
        if self._server is not None:
            await self._server.wait_closed()


class _Upstream(asyncio.Protocol):
    """The connection to Serve's proxy, on behalf of one client connection."""

    def __init__(self, connection: _Connection):
        self.connection = connection

    def data_received(self, data: bytes) -> None:
        self.connection.from_upstream(data)

    def eof_received(self) -> bool:
        return False  # close: the connection's end is handled in connection_lost

    def pause_writing(self) -> None:
        self.connection.pause_client("upstream-full")

    def resume_writing(self) -> None:
        self.connection.resume_client("upstream-full")

    def connection_lost(self, exc: Exception | None) -> None:
        self.connection.upstream_lost()


class _Connection(asyncio.Protocol):
    """One client connection and, unless it is over the cap, its connection to Serve's proxy."""

    def __init__(self, door: FrontDoor):
        self.door = door
        self.client: asyncio.Transport | None = None
        self.upstream: UpstreamLink | None = None
        self.requests = MessageFraming("request")
        self.responses = MessageFraming("response")
        self.over_cap = False
        self.request_begun = False  # bytes of a request whose head is not complete
        self.heads = 0  # requests whose head is complete
        self.answered = 0  # final responses complete
        self.late = False  # the header deadline passed: a 408 is owed
        self.finished = False  # answered or closed: nothing more is relayed
        self._deadline: Timer | None = None
        self._linger: asyncio.TimerHandle | None = None
        self._held: list[bytes] = []  # client bytes for Serve's proxy, before it is connected
        self._held_size = 0
        self._client_eof = False
        self._client_pauses: set[str] = set()
        self._upstream_paused = False
        self._connect: asyncio.Task[None] | None = None

    @property
    def in_flight(self) -> bool:
        """A request is begun on this connection and not answered (nor refused) yet."""
        return not self.finished and (self.request_begun or self.heads > self.answered)

    # Client side (asyncio.Protocol).

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.client = transport
        self.door._open.add(self)
        self.over_cap = len(self.door._open) > self.door.limits.max_connections
        self._arm()
        if not self.over_cap:
            self._connect = asyncio.get_running_loop().create_task(self._open_upstream())

    def data_received(self, data: bytes) -> None:
        if self.finished:
            return  # lingering after an answer: discarded
        for event in self.requests.feed(data) if self.requests.tracking else ():
            if event.kind == "begin":
                self.request_begun = True
                if self._deadline is None:
                    self._arm()
            elif event.kind == "head":
                self._disarm()
                self.request_begun = False
                self.heads += 1
                self.responses.expect_response_to(event.method)
            elif event.kind == "malformed":
                self._disarm()
                self.request_begun = False
            if self.over_cap and event.kind in ("head", "malformed"):
                self._refuse("connections", ServiceError(
                    "overloaded", f"too many open connections (more than "
                    f"{self.door.limits.max_connections}); retry later", retry_after=1))
                return
        if self.over_cap:
            return
        if self.upstream is not None:
            self.upstream.write(data)
        else:
            self._held.append(data)
            self._held_size += len(data)
            if self._held_size > _HELD_BEFORE_CONNECT:
                self.pause_client("connecting")

    def eof_received(self) -> bool:
        self._client_eof = True
        self._disarm()
        if self.finished or self.over_cap:
            return False
        if self.upstream is not None:
            self.upstream.write_eof()
        return True  # keep sending Serve's answers until it closes

    def pause_writing(self) -> None:
        if self.upstream is not None and not self._upstream_paused:
            self._upstream_paused = True
            self.upstream.pause_reading()

    def resume_writing(self) -> None:
        if self.upstream is not None and self._upstream_paused:
            self._upstream_paused = False
            self.upstream.resume_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        self.door._closed(self)
        self.finished = True
        self._disarm()
        if self._linger is not None:
            self._linger.cancel()
        if self._connect is not None and not self._connect.done():
            self._connect.cancel()
        if self.upstream is not None:
            self.upstream.close()

    # Upstream side.

    async def _open_upstream(self) -> None:
        loop = asyncio.get_running_loop()
        waited, delay = 0.0, UPSTREAM_RETRY_FIRST_S
        while True:
            try:
                link = await open_link(loop, *self.door.upstream, _Upstream(self))
                break
            except OSError as exc:
                self.door.upstream_failures += 1
                if self.finished:   # answered meanwhile (a header deadline): nothing to relay
                    return
                left = self.door.limits.upstream_wait_s - waited
                if left <= 0:
                    logger.warning("front door: cannot reach Serve's proxy at %s:%d (%s) after "
                                   "waiting %.1f s; closing the client's connection",
                                   *self.door.upstream, exc, waited)
                    self.abort()
                    return
                wait = min(delay, left)
                await self._wait(wait)
                waited += wait
                delay = min(2 * delay, UPSTREAM_RETRY_MAX_S)
        if self.finished:
            link.close()
            return
        self.upstream = link
        link.writelines(self._held)
        self._held.clear()
        self._held_size = 0
        self.resume_client("connecting")
        if self._client_eof:
            link.write_eof()

    async def _wait(self, seconds: float) -> None:
        """Sleep `seconds` by the front door's clock (cancelled with the connection)."""
        woken: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        timer = self.door.clock.call_later(seconds, lambda: woken.done() or woken.set_result(None))
        try:
            await woken
        finally:
            timer.cancel()

    def from_upstream(self, data: bytes) -> None:
        if self.finished or self.client is None:
            return
        for event in self.responses.feed(data) if self.responses.tracking else ():
            if event.kind == "end":
                self.answered += 1
            elif event.kind == "head" and not self.responses.tracking:
                # A 101 (or a CONNECT's 2xx): the connection is a tunnel from here on.
                self.requests.stop()
                self._disarm()
                self.request_begun = False
        self.client.write(data)
        if self.late:
            self._answer_late()
        elif self.door.draining and not self.in_flight:
            self._finish()  # its last request is answered: no other is taken while draining

    def upstream_lost(self) -> None:
        self.upstream = None
        if self.finished:
            return
        self.answered += sum(1 for e in self.responses.finish() if e.kind == "end")
        if self.late:
            self._answer_late()
        if not self.finished:
            self._finish()

    # Flow control.

    def pause_client(self, reason: str) -> None:
        if not self._client_pauses and self.client is not None:
            self.client.pause_reading()
        self._client_pauses.add(reason)

    def resume_client(self, reason: str) -> None:
        if reason not in self._client_pauses:
            return
        self._client_pauses.discard(reason)
        if not self._client_pauses and self.client is not None:
            self.client.resume_reading()

    # The header deadline.

    def _arm(self) -> None:
        self._deadline = self.door.clock.call_later(self.door.limits.header_timeout_s,
                                                    self._deadline_passed)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _deadline_passed(self) -> None:
        self._deadline = None
        if self.finished:
            return
        if not self.request_begun:  # a connection that never sent a byte
            self.door.on_refusal("idle")
            self.abort()
            return
        self.door.on_refusal("headers")
        self.late = True
        self.pause_client("late")
        self._answer_late()

    def _answer_late(self) -> None:
        """Answer the late request with its 408 once every request before it is answered (at
        once when Serve's proxy has closed); close without an answer when responses can no
        longer be followed."""
        if self.heads > self.answered:
            if self.upstream is not None and self.responses.tracking:
                return  # the answers before it are still coming
            self.abort()  # they will not come, or cannot be told apart from the 408
            return
        self._refuse(None, ServiceError(
            "timeout", f"the request headers did not arrive within "
            f"{self.door.limits.header_timeout_s:g} s", "headers"))

    # Ending.

    def _refuse(self, kind: Refusal | None, error: ServiceError) -> None:
        """Answer `error`, counted as `kind` (None: already counted), and close."""
        if kind is not None:
            self.door.on_refusal(kind)
        assert self.client is not None
        self.client.write(error_response_bytes(error))
        self._finish()

    def _finish(self) -> None:
        """Close Serve's side, send the client what is buffered and a FIN, and close after the
        client closes or `linger_s`, discarding what it still sends."""
        self.finished = True
        self._disarm()
        if self.upstream is not None:
            self.upstream.close()
        if self.client is None or self.client.is_closing():
            return
        if self._client_eof or not self.client.can_write_eof():
            self.client.close()
            return
        self.client.write_eof()
        self._client_pauses.clear()
        self.client.resume_reading()
        self._linger = asyncio.get_running_loop().call_later(self.door.limits.linger_s, self.client.close)

    def abort(self) -> None:
        """Close both sides at once, without an answer."""
        self.finished = True
        self._disarm()
        if self._connect is not None and not self._connect.done():
            self._connect.cancel()
        if self.upstream is not None:
            self.upstream.close()
        if self.client is not None:
            self.client.close()


@contextmanager
def front_door_thread(upstream: tuple[str, int], host: str, port: int,
                      limits: FrontDoorLimits = FrontDoorLimits(),
                      drain_s: float = 0.0) -> Iterator[FrontDoor]:
    """Run a :class:`FrontDoor` on `host`:`port` on an event loop of its own, in a daemon
    thread; yield it once it listens (a bind error is raised here); on exit, drain it for at
    most `drain_s` seconds (:meth:`FrontDoor.drain`; 0: no drain), close it and end the
    thread."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="dialscore-front-door", daemon=True)
    thread.start()
    door = FrontDoor(upstream, limits)
    try:
        asyncio.run_coroutine_threadsafe(door.start(host, port), loop).result()
        yield door
    finally:
        try:
            if drain_s > 0:
                asyncio.run_coroutine_threadsafe(door.drain(drain_s), loop).result(drain_s + 30)
            asyncio.run_coroutine_threadsafe(door.close(), loop).result(timeout=30)
        finally:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(30)
            loop.close()
