"""Slow-client limits in front of the gateway: a deadline for a request's headers and a cap on
open connections, enforced in Ray Serve's HTTP proxy, where connections are accepted.

Neither can be set through Serve's ``HTTPOptions`` (Ray 2.60 builds the proxy's uvicorn
``Config`` from host, port, root_path, keep-alive and TLS only), and no ASGI code runs before a
request's headers are complete, so the gateway itself never sees a client that trickles its
headers or opens connections and sends nothing. Ray's one hook into the proxy process is
``RAY_SERVE_HTTP_PROXY_CALLBACK_IMPORT_PATH`` (a function called when each proxy starts, before
its server is built); :func:`install` is that function: it makes the proxy's uvicorn server use
:class:`GuardedHttpToolsProtocol` (uvicorn's own httptools protocol, the one the proxy uses by
default, plus the two limits) and returns no middleware.

The limits, per proxy (one per node), read from the proxy's environment when it starts:

* ``DIALSCORE_HEADER_TIMEOUT_S`` (default 10): from a connection's opening, and from the first
  byte of each later request on it, the request's headers must be complete within this many
  seconds. A request begun and not finished in time is answered **408** (``timeout``, param
  ``headers``; ``x-work-dropped: true`` as every 408 of the service: nothing was computed, so a
  retry doubles nothing) and the connection closed; a connection that sent nothing at all is closed
  without an answer (there is no request to answer). Idle keep-alive connections stay governed
  by ``keep_alive_timeout_s``.
* ``DIALSCORE_MAX_CONNECTIONS`` (default 1024): a connection opened while this many are already
  open gets **503** (``overloaded``, ``Retry-After: 1``) to its first request, then is closed.
  Unlike uvicorn's ``limit_concurrency`` (503 in plain text to every connection once over the
  limit), connections admitted earlier keep being served, and the answer is the service's own
  error response (gateway/http_errors.py).

Both are counted in ``dialscore_slow_clients_total{kind="headers"|"idle"|"connections"}``,
recorded from the proxy process to Ray's metrics. :func:`proxy_environment` gives the variables a
Ray node needs (the embedded default sets them before starting Ray; deployments/ set them on the
Ray containers).

This reaches into uvicorn's protocol class (callbacks ``connection_made``, ``on_message_begin``,
``on_headers_complete``, ``connection_lost``), which is stable across uvicorn releases but not
public API; tests/service/test_slow_clients.py checks it on the real proxy.
"""

from __future__ import annotations

import asyncio
import os
from http import HTTPStatus
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from dialscore_server import metrics
from dialscore_server.contract.errors import ServiceError
from dialscore_server.gateway.http_errors import error_response

#: The Ray hook this module fills, and the value that names :func:`install`.
CALLBACK_VARIABLE = "RAY_SERVE_HTTP_PROXY_CALLBACK_IMPORT_PATH"
CALLBACK = "dialscore_server.gateway.proxy_guard:install"
HEADER_TIMEOUT_VARIABLE = "DIALSCORE_HEADER_TIMEOUT_S"
MAX_CONNECTIONS_VARIABLE = "DIALSCORE_MAX_CONNECTIONS"
DEFAULT_HEADER_TIMEOUT_S = 10.0
DEFAULT_MAX_CONNECTIONS = 1024


def proxy_environment(header_timeout_s: float | None = None, max_connections: int | None = None
                      ) -> dict[str, str]:
    """The environment a Ray node needs for its proxy to enforce the limits (None: default)."""
    env = {CALLBACK_VARIABLE: CALLBACK}
    if header_timeout_s is not None:
        env[HEADER_TIMEOUT_VARIABLE] = str(header_timeout_s)
    if max_connections is not None:
        env[MAX_CONNECTIONS_VARIABLE] = str(max_connections)
    return env


def _error(err: ServiceError) -> bytes:
    """The raw HTTP/1.1 response the gateway would send for `err` (the one error mapping,
    gateway/http_errors.py: status, JSON body, ``x-error-type``, ``Retry-After``), closing the
    connection."""
    response = error_response(err)
    head = b"".join(name + b": " + value + b"\r\n" for name, value in response.raw_headers)
    return (b"HTTP/1.1 %d %s\r\n%sconnection: close\r\n\r\n"
            % (response.status_code, HTTPStatus(response.status_code).phrase.encode(), head)
            + bytes(response.body))


class GuardedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with a header deadline and a connection cap (see the module
    docstring). Class attributes hold the limits (set by :func:`install`)."""

    header_timeout_s: float = DEFAULT_HEADER_TIMEOUT_S
    max_connections: int = DEFAULT_MAX_CONNECTIONS

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        # Counted with this connection included: over the cap when more than the cap are open.
        self._over_cap = len(self.connections) > self.max_connections
        self._request_begun = False
        self._header_deadline: asyncio.TimerHandle | None = None
        self._arm()

    def _arm(self) -> None:
        self._disarm()
        self._header_deadline = self.loop.call_later(self.header_timeout_s, self._headers_late)

    def _disarm(self) -> None:
        if self._header_deadline is not None:
            self._header_deadline.cancel()
            self._header_deadline = None

    def on_message_begin(self) -> None:
        super().on_message_begin()
        if not self._request_begun:  # a later request on a kept-alive connection: a new deadline
            self._request_begun = True
            if self._header_deadline is None:
                self._arm()

    def on_headers_complete(self) -> None:
        self._disarm()
        self._request_begun = False
        if self._over_cap:
            metrics.SLOW_CLIENTS.labels("connections").inc()
            self.transport.write(_error(ServiceError(
                "overloaded", f"too many open connections to this proxy (more than "
                f"{self.max_connections}); retry later", retry_after=1)))
            self.transport.close()
            return
        super().on_headers_complete()

    def _headers_late(self) -> None:
        self._header_deadline = None
        if self.transport.is_closing():
            return
        if self._request_begun:
            metrics.SLOW_CLIENTS.labels("headers").inc()
            self.transport.write(_error(ServiceError(
                "timeout", f"the request headers did not arrive within "
                f"{self.header_timeout_s:g} s", "headers")))
        else:
            metrics.SLOW_CLIENTS.labels("idle").inc()
        self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)


def install() -> list[Any]:
    """Ray's proxy callback (``RAY_SERVE_HTTP_PROXY_CALLBACK_IMPORT_PATH``): make this process's
    uvicorn servers use :class:`GuardedHttpToolsProtocol` with the limits from the environment,
    let the metrics record to Ray from this (non-replica) process, and add no middleware."""
    import uvicorn

    GuardedHttpToolsProtocol.header_timeout_s = float(
        os.environ.get(HEADER_TIMEOUT_VARIABLE, DEFAULT_HEADER_TIMEOUT_S))
    GuardedHttpToolsProtocol.max_connections = int(
        os.environ.get(MAX_CONNECTIONS_VARIABLE, DEFAULT_MAX_CONNECTIONS))
    metrics.record_to_ray_from_this_worker()
    base = uvicorn.Config
    if not getattr(base, "_dialscore_guarded", False):

        class GuardedConfig(base):  # type: ignore[misc, valid-type]
            """uvicorn's Config, with the guarded protocol unless another one is asked for."""

            _dialscore_guarded = True

            def __init__(self, *args: Any, **kwargs: Any):
                if kwargs.get("http", "auto") == "auto":
                    kwargs["http"] = GuardedHttpToolsProtocol
                super().__init__(*args, **kwargs)

        uvicorn.Config = GuardedConfig  # type: ignore[misc]
    return []
