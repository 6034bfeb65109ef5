"""When a request is sent again, and after how long: :class:`RetryPolicy`, a client's
configuration, and :func:`parse_retry_after`, the reading of a ``Retry-After`` header.

The policy decides from one response or transport error at a time; the decisions a client takes
across the attempts of one call (counting them, the retry budget, waiting for a refused service)
are :mod:`dialscore.retrying`'s.
"""

from __future__ import annotations

import email.utils
import random
import time
from dataclasses import dataclass

import httpx

__all__ = ["RETRYABLE_TRANSPORT_ERRORS", "RetryPolicy", "parse_retry_after"]

#: Transport failures worth another try: the connection failed, dropped, or timed out.
RETRYABLE_TRANSPORT_ERRORS: tuple[type[httpx.TransportError], ...] = (
    httpx.NetworkError, httpx.RemoteProtocolError, httpx.TimeoutException,
)


@dataclass(frozen=True)
class RetryPolicy:
    """When and how long to wait before re-sending a request.

    ``max_attempts`` counts every send, the first included (1 = never retry).
    """

    max_attempts: int = 5
    backoff_base: float = 0.5
    backoff_max: float = 30.0
    #: A Retry-After longer than this is cut to it.
    max_retry_after: float = 120.0
    retry_statuses: frozenset[int] = frozenset({408, 424, 429, 502, 503, 504})
    retry_connection_errors: bool = True
    #: A Retry-After of ``s`` seconds waits ``s * (1 + U(0, retry_after_jitter))``.
    retry_after_jitter: float = 0.25
    #: Re-send after this client's own read/write timeout (the server may still be computing the
    #: first request: off by default). Connect and pool timeouts are always retried.
    retry_read_timeouts: bool = False
    #: Retry a 500 that lacks the service's ``x-error-type`` header: Serve's proxy answers a plain
    #: 500 when the gateway replica handling the request dies (node loss, replica crash). Safe
    #: because every endpoint is a pure function of its input. The service's own 500
    #: (``internal``: a bug, the same on every try) is never retried.
    retry_proxy_500: bool = True
    #: Retry a plain-text 404 that lacks the service's ``x-error-type`` header: a Serve proxy that
    #: has just started (after the previous one died) answers ``Path '...' not found`` as text
    #: until it has loaded the application's routes. The service's own 404s (``not_found``,
    #: ``unknown_model``) and a JSON 404 from any other web app (a route it does not have, such
    #: as an ``/openapi.json`` switched off) are final; a URL answered by a plain-text 404
    #: costs ``max_attempts`` tries.
    retry_proxy_404: bool = True
    #: Wait for the service to be reachable (gRPC's "wait for ready"): a refused connection
    #: (``httpx.ConnectError``: no connection was made, nothing was sent) is tried again without
    #: counting as an attempt and without taking a token of the retry budget, until the call has
    #: waited this many seconds in all for connections to be accepted; then it raises
    #: :class:`~dialscore.errors.APIConnectionError`. Covers a Serve proxy that is down until
    #: its controller starts a new one. 0 makes a refusal an ordinary failed attempt.
    unreachable_wait_s: float = 60.0
    #: The delay after the k-th refusal in a row is drawn from
    #: ``[0, min(unreachable_backoff_max, backoff_base * 2**(k-1))]``.
    unreachable_backoff_max: float = 2.0

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        if self.unreachable_wait_s < 0 or self.unreachable_backoff_max <= 0:
            raise ValueError("unreachable_wait_s must be >= 0 and unreachable_backoff_max > 0")

    def retries(self, response: httpx.Response) -> bool:
        """Whether this response's status is worth another attempt (a 408 only when the server
        says it dropped the work)."""
        if response.status_code == 408:
            return 408 in self.retry_statuses and (
                response.headers.get("x-work-dropped", "").lower() == "true")
        if response.status_code in self.retry_statuses:
            return True
        if "x-error-type" in response.headers:
            return False
        return ((self.retry_proxy_500 and response.status_code == 500)
                or (self.retry_proxy_404 and response.status_code == 404
                    and "json" not in response.headers.get("content-type", "")))

    def backoff(self, attempt: int, rng: random.Random) -> float:
        """Full-jitter delay after failed attempt number ``attempt`` (1-based)."""
        cap = min(self.backoff_max, self.backoff_base * 2 ** (attempt - 1))
        return rng.uniform(0.0, cap)

    def unreachable_backoff(self, refusals: int, rng: random.Random) -> float:
        """Full-jitter delay after the `refusals`-th refused connection in a row (1-based)."""
        cap = min(self.unreachable_backoff_max, self.backoff_base * 2 ** min(refusals - 1, 30))
        return rng.uniform(0.0, cap)


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header (delta-seconds or an HTTP date), or None."""
    if value is None:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when is None:
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))
