"""The front door's connection to Serve's proxy: a socket that keeps reading after its writes
fail, so that an answer Serve's proxy sent is relayed even when it closed before reading the
whole request.

Serve's proxy answers some requests before their body has arrived (a 413 past
``max_body_bytes``) and then closes its connection without reading the rest. Its kernel then
resets the connection, and the front door's next write to it fails, while the answer may still
be unread in the front door's socket. An asyncio transport ends the connection on that failed
write and drops what was unread: the client would meet a closed connection instead of its 413.
:class:`UpstreamLink` instead stops sending (what the client still sends is discarded) and reads
until the end of the stream: the answer, then the reset.

It is driven by the event loop's public readiness callbacks (``add_reader``/``add_writer``) over
a non-blocking socket, and offers the part of ``asyncio.Transport`` the front door uses.
"""

from __future__ import annotations

import asyncio
import socket
from collections import deque

#: Bytes read per readiness callback.
READ_SIZE = 256 * 1024
#: Bytes buffered for Serve's proxy above which the client stops being read (``pause_writing``);
#: it is read again once they are all sent (``resume_writing``).
HIGH_WATER = 64 * 1024


async def open_link(loop: asyncio.AbstractEventLoop, host: str, port: int,
                    protocol: asyncio.Protocol) -> UpstreamLink:
    """Connect to `host`:`port` (an OSError when refused) and return the link, which calls
    `protocol`'s ``data_received``, ``eof_received``, ``pause_writing``, ``resume_writing`` and
    ``connection_lost`` as an asyncio transport would."""
    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        await loop.sock_connect(sock, address)
    except BaseException:
        sock.close()
        raise
    link = UpstreamLink(loop, sock, protocol)
    protocol.connection_made(link)  # type: ignore[arg-type]
    return link


class UpstreamLink:
    """One connected socket (see the module docstring). Writes are buffered while the socket
    is full; after a failed write every later write is discarded and reading goes on until the
    peer's end of stream or an error, which ends the link (``connection_lost``)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, sock: socket.socket,
                 protocol: asyncio.Protocol):
        self._loop = loop
        self._sock = sock
        self._fd = sock.fileno()
        self._protocol = protocol
        self._buffer: deque[memoryview] = deque()
        self._buffered = 0
        self._writing_paused = False  # the protocol was told pause_writing
        self._eof_pending = False  # write_eof once the buffer is sent
        self._write_failed = False
        self._reading = True
        self._closed = False
        loop.add_reader(self._fd, self._on_readable)

    # The transport's interface, as the front door uses it.

    def write(self, data: bytes) -> None:
        if self._closed or self._write_failed or self._eof_pending or not data:
            return
        view = memoryview(bytes(data))
        if not self._buffer:
            try:
                sent = self._sock.send(view)
            except (BlockingIOError, InterruptedError):
                sent = 0
            except OSError:
                self._writes_failed()
                return
            view = view[sent:]
            if not view:
                return
            self._loop.add_writer(self._fd, self._on_writable)
        self._buffer.append(view)
        self._buffered += len(view)
        if self._buffered > HIGH_WATER and not self._writing_paused:
            self._writing_paused = True
            self._protocol.pause_writing()

    def writelines(self, chunks: list[bytes]) -> None:
        for chunk in chunks:
            self.write(chunk)

    def write_eof(self) -> None:
        if self._closed or self._write_failed or self._eof_pending:
            return
        self._eof_pending = True
        if not self._buffer:
            self._shutdown_write()

    def pause_reading(self) -> None:
        if self._reading and not self._closed:
            self._reading = False
            self._loop.remove_reader(self._fd)

    def resume_reading(self) -> None:
        if not self._reading and not self._closed:
            self._reading = True
            self._loop.add_reader(self._fd, self._on_readable)

    def is_closing(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Close at once (what is buffered is dropped); ``connection_lost(None)`` follows."""
        self._end(None)

    # Readiness callbacks.

    def _on_readable(self) -> None:
        try:
            data = self._sock.recv(READ_SIZE)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._end(exc)
            return
        if not data:
            self._loop.remove_reader(self._fd)
            self._reading = False
            if not self._protocol.eof_received():
                self._end(None)
            return
        self._protocol.data_received(data)

    def _on_writable(self) -> None:
        while self._buffer:
            try:
                sent = self._sock.send(self._buffer[0])
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                self._writes_failed()
                return
            self._buffered -= sent
            if sent < len(self._buffer[0]):
                self._buffer[0] = self._buffer[0][sent:]
                break
            self._buffer.popleft()
        if self._buffer:
            return
        self._loop.remove_writer(self._fd)
        self._resume_protocol()
        if self._eof_pending:
            self._shutdown_write()

    # Ending.

    def _shutdown_write(self) -> None:
        try:
            self._sock.shutdown(socket.SHUT_WR)
        except OSError:
            self._writes_failed()

    def _writes_failed(self) -> None:
        """The peer reset or closed: nothing more is sent; what it sent is still read."""
        self._write_failed = True
        if self._buffer:
            self._loop.remove_writer(self._fd)
            self._buffer.clear()
            self._buffered = 0
        self._resume_protocol()

    def _resume_protocol(self) -> None:
        if self._writing_paused:
            self._writing_paused = False
            self._protocol.resume_writing()

    def _end(self, exc: Exception | None) -> None:
        if self._closed:
            return
        self._closed = True
        self._loop.remove_reader(self._fd)
        if self._buffer:
            self._loop.remove_writer(self._fd)
            self._buffer.clear()
        self._sock.close()
        self._loop.call_soon(self._protocol.connection_lost, exc)
