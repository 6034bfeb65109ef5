"""The gateway's outermost own middleware: check each request's ``Host`` (while auth is off and a
Host check is set: contract/host_check.py), authorise it (when a token is set), then count and
time it (``dialscore_requests_total``, ``dialscore_request_latency_seconds``,
``dialscore_errors_total``).

A plain ASGI middleware rather than Starlette's ``BaseHTTPMiddleware`` (``@app.middleware``):
that one runs the app in a task group and passes every message through memory streams, a cost
per request of the order of POST /v1/nll's own work in the gateway
(docs/benchmarks/served-path.md). Observed: the status and ``x-error-type`` of the response
start, timed when the response starts, once per request that got a response; a request whose client left before any response
is not counted. An exception nobody handled (a bug) is answered here as 500 ``internal``, so it is
counted too.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection
from typing import Any

from starlette.datastructures import Headers

from dialscore_server import metrics
from dialscore_server.contract.errors import ServiceError
from dialscore_server.contract import http_errors
from dialscore_server.gateway.auth import authorized
from dialscore_server.contract.host_check import ALLOWED_HOSTS_VARIABLE, AllowedHosts

Scope = dict[str, Any]
ASGIApp = Callable[..., Any]


def app_path(scope: Scope) -> str:
    """The request path inside this app (without the route prefix it is served under)."""
    path, root = scope.get("path", ""), scope.get("root_path", "")
    if root and path.startswith(root):
        path = path[len(root):] or "/"
    return path


class ObserveRequests:
    """ASGI middleware: while no token is set, refuse a request whose ``Host`` the Host check
    (``allowed_hosts_of()``, read per request; None: no check) does not allow with 403
    ``host_not_allowed`` (param ``Host``); refuse a request without the right bearer token
    (``token_of()``, read per request; None: no token needed) with 401 ``unauthorized``; record every answered HTTP
    request under its path when that is one of `known_paths` (else ``other``: bounded label
    cardinality). `known_paths` may be filled after the middleware is added (it is read per
    request)."""

    def __init__(self, app: ASGIApp, token_of: Callable[[], str | None], known_paths: Collection[str],
                 allowed_hosts_of: Callable[[], AllowedHosts | None] = lambda: None):
        self.app = app
        self.token_of = token_of
        self.known_paths = known_paths
        self.allowed_hosts_of = allowed_hosts_of

    async def __call__(self, scope: Scope, receive, send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        start = time.perf_counter()
        path = app_path(scope)
        endpoint = path if path in self.known_paths else "other"

        started = False

        async def observed(message: dict[str, Any]) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                record(endpoint, message["status"], Headers(raw=message.get("headers") or []),
                       start)
            await send(message)

        token, hosts, headers = self.token_of(), self.allowed_hosts_of(), Headers(scope=scope)
        if token is None and hosts is not None and not hosts.allows(headers.get("host")):
            response = http_errors.error_response(ServiceError(
                "host_not_allowed", f"Host {headers.get('host')!r} is not a loopback name or "
                "address and not an allowed host (a guard against DNS rebinding); to allow it, "
                f"start the service with --allowed-hosts or {ALLOWED_HOSTS_VARIABLE}", "Host"))
            return await response(scope, receive, observed)
        if not authorized(token, path, headers.get("authorization")):
            response = http_errors.error_response(
                ServiceError("unauthorized", "missing or wrong bearer token"))
            return await response(scope, receive, observed)
        try:
            await self.app(scope, receive, observed)
        except Exception:
            # A bug: answered here (so it is counted) as the one error shape's `internal`, then
            # raised on for the server's log (Starlette sends nothing more once a response began).
            if not started:
                await http_errors.internal_error_response()(scope, receive, observed)
            raise


def record(endpoint: str, status: int, headers: Headers, start: float) -> None:
    """Count and time one answered request (`start`: its perf_counter at arrival)."""
    metrics.REQUESTS.labels(endpoint, str(status)).inc()
    metrics.LATENCY.labels(endpoint).observe(time.perf_counter() - start)
    error_type = headers.get("x-error-type")
    if error_type is not None:
        metrics.ERRORS.labels(endpoint, error_type).inc()
