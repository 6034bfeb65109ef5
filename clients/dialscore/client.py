"""HTTP clients for the dialscore service: :class:`DialscoreClient` (sync) and
:class:`AsyncDialscoreClient` (asyncio), with the same methods.

Built like httpx's own ``Client``/``AsyncClient``: a shared base builds requests, decides about
retries and parses responses into typed results (:mod:`dialscore.types`); the two subclasses only
differ in how they send and sleep. Example::

    from dialscore.client import DialscoreClient

    with DialscoreClient("http://127.0.0.1:8000") as client:
        print([m.name for m in client.models()])
        out = client.nll("dialogpt-medium", [{"context": ["Hi!"], "target": "Hello."}])
        print(out.results[0].nll)

Behaviour:

* **Errors** become the exceptions of :mod:`dialscore.errors` (mirroring ``services/dialscore_server/contract/errors.py``);
  each carries ``request``, ``response``, ``param`` and ``attempts``.
* **Retries** (:class:`RetryPolicy`): statuses 408, 424, 429, 502, 503, 504, a 500 that does not
  carry the service's error body (Serve's proxy answering for a gateway replica that died with the
  request in flight), a plain-text 404 without it (a new Serve proxy that has not loaded the
  routes yet)
  and dropped or failed connections, resets included (httpx's
  ``NetworkError``, ``RemoteProtocolError`` and ``TimeoutException``) are retried with exponential backoff and full jitter (a delay drawn uniformly from
  ``[0, min(backoff_max, backoff_base * 2**(attempt-1))]``); a ``Retry-After`` header (seconds or
  an HTTP date) replaces the drawn delay, plus a random extra of up to ``retry_after_jitter`` of
  it (so clients told the same Retry-After do not come back in step). Validation errors (422) and
  the other 4xx are never retried. Every endpoint is a pure function of its input, so re-sending
  a POST is safe; but a request the server may still be computing is not re-sent: a 408 is
  retried only when the server says it dropped the work (``x-work-dropped: true``, which the
  gateway sends with its own deadline 408), and a read or write timeout of this client only with
  ``retry_read_timeouts``.
* **Waiting for the service** (``RetryPolicy.unreachable_wait_s``, default 60 s, gRPC's "wait
  for ready"): a refused connection (``httpx.ConnectError``; nothing was sent) is not an attempt
  and takes no retry-budget token; the call tries again after a full-jitter delay of at most
  ``unreachable_backoff_max`` (2 s) until it has waited ``unreachable_wait_s`` in all, then
  raises :class:`~dialscore.errors.APIConnectionError` saying the service is unreachable. So a
  call outlasts any run of refusals shorter than that (a Serve proxy being replaced, about 30 s
  with Ray's default proxy health checks) and gives up after at most
  ``unreachable_wait_s + unreachable_backoff_max`` seconds of waiting.
* **Retry budget** (:class:`~dialscore.retry_budget.RetryBudget`, one per client unless given,
  shared by all its calls and threads): gRPC-style retry throttling, by default
  ``2 * max_attempts * max_concurrency`` tokens (retries stop after about ``max_attempts`` failed
  attempts per concurrent slot with no success between) and 0.5 token back per success. When
  it is spent, the call raises :class:`~dialscore.errors.RetryBudgetExhaustedError`.
* **Concurrency**: at most ``max_concurrency`` requests of one client are in flight at once
  (an ``asyncio.Semaphore`` in the async client, a thread semaphore in the sync one); a request
  waiting out its backoff does not hold a slot.
* **Limits**: :meth:`DialscoreClient.limits` reads the deployment's published request limits
  once from ``GET /openapi.json`` (``info["x-limits"]``) and caches them; a deployment that
  publishes none gives None.
* **Large jobs**: :meth:`DialscoreClient.nll_many` splits items into requests of at most
  ``chunk_size`` items and ``max_chunk_bytes`` of JSON (both capped at the published
  ``max_items`` and ``max_body_bytes`` once :meth:`~DialscoreClient.limits` has read them),
  sends them concurrently and returns the results in the order of the items. A chunk refused as
  too large as a whole (413 whose ``param`` is ``items``, ``body`` or absent) is split in two
  and re-sent (:mod:`dialscore.batching`).
* **Auth**: ``token=`` or the ``DIALSCORE_TOKEN`` environment variable adds
  ``Authorization: Bearer <token>``. The URL defaults to ``DIALSCORE_URL`` or
  ``http://127.0.0.1:8000``.
* **Priority lanes**: ``priority="bulk"`` sends ``X-Dialscore-Priority: bulk`` with every request
  (bulk work yields the engine to interactive requests; the service serves it with a bounded
  share meanwhile), ``priority="interactive"`` asks for the interactive lane, which the service
  grants only to requests within its cost cap; None (the default) sends no header: interactive.
  The probe and evaluation runs ask for bulk unless the client names a priority
  (:mod:`dialscore.sync_bridge`, the CLI's ``--priority``). The lane a response was served in is
  its ``x-dialscore-lane`` header.
* **Tests** pass ``transport=httpx.MockTransport(handler)`` (or ``httpx.MockTransport`` with an
  async handler for the async client).
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import logging
import os
import random
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

import httpx
from pydantic import BaseModel, ValidationError

from dialscore import __version__
from dialscore.batching import (
    ChunkResults, arun_chunks, asend_halving, cap, run_chunks, send_halving,
)
from dialscore.errors import (
    APIConnectionError,
    APIStatusError,
    APITimeoutError,
    ResponseValidationError,
    RetryBudgetExhaustedError,
    error_class,
)
from dialscore.model_card import ModelCard
from dialscore.retry_budget import RetryBudget
from dialscore.types import (
    ContradictionResponse,
    Health,
    ModelList,
    NLLDialogue,
    NLLDialoguesResponse,
    NLLItem,
    NLLResponse,
    NLLResult,
    PublishedLimits,
    RerankResponse,
    Turn,
)

__all__ = ["AsyncDialscoreClient", "DialscoreClient", "RetryPolicy", "DEFAULT_TIMEOUT", "DEFAULT_URL",
           "PRIORITY_HEADER", "Priority"]

log = logging.getLogger("dialscore.client")

DEFAULT_URL = "http://127.0.0.1:8000"
#: Scoring a big chunk on CPU can take a while: generous read timeout, short connect timeout.
DEFAULT_TIMEOUT = httpx.Timeout(120.0, connect=10.0)
USER_AGENT = f"dialscore-client/{__version__}"
#: The request header that asks for a priority lane (the service's contract/priority.py).
PRIORITY_HEADER = "X-Dialscore-Priority"
#: A lane a client may ask for.
Priority = Literal["interactive", "bulk"]

R = TypeVar("R", bound=BaseModel)
ItemLike = NLLItem | Mapping[str, Any]
TurnLike = Turn | Mapping[str, Any]
#: A dialogue for ``score_dialogues``: an :class:`~dialscore.types.NLLDialogue`, a mapping of
#: the same shape, or a plain sequence of turn texts (every turn scored).
DialogueLike = NLLDialogue | Mapping[str, Any] | Sequence[str]
#: ``on_chunk(offset, results)``: called once per finished chunk, in completion order; ``offset``
#: is the index of the chunk's first item in the ``items`` given to ``nll_many``.
ChunkCallback = Callable[[int, list[NLLResult]], None]

#: Bytes of a POST /v1/nll body besides its items (model name, keys, brackets), kept free under
#: the published max_body_bytes when chunks are planned by their items' JSON size.
BODY_ENVELOPE_BYTES = 4096

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


@dataclass
class Unreachable:
    """One call's wait for the service to be reachable: refused connections in a row, and the
    seconds waited after refusals in all (:attr:`RetryPolicy.unreachable_wait_s`)."""

    in_a_row: int = 0
    refused: int = 0
    waited_s: float = 0.0


NO_RETRY = RetryPolicy(max_attempts=1)

#: What a retry decision returns when the retry budget forbids the retry.
BUDGET_SPENT = -1.0

#: What one attempt at sending a request gave: a response, or the transport error it raised.
Outcome = httpx.Response | httpx.TransportError


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


def _item_json(item: ItemLike) -> dict[str, Any]:
    if isinstance(item, NLLItem):
        return item.to_json()
    if isinstance(item, Mapping):
        return dict(item)
    raise TypeError(f"an NLL item must be an NLLItem or a mapping, not {type(item).__name__}")


def _turn_json(turn: TurnLike) -> dict[str, Any]:
    if isinstance(turn, Turn):
        return turn.to_json()
    if isinstance(turn, Mapping):
        return dict(turn)
    raise TypeError(f"a turn must be a Turn or a mapping, not {type(turn).__name__}")


def _dialogue_json(dialogue: Mapping[str, Any] | Sequence[TurnLike]) -> dict[str, Any]:
    if isinstance(dialogue, Mapping):
        out = dict(dialogue)
        out["turns"] = [_turn_json(t) for t in dialogue.get("turns", [])]
        return out
    return {"turns": [_turn_json(t) for t in dialogue]}


def _nll_dialogue_json(dialogue: DialogueLike) -> dict[str, Any]:
    if isinstance(dialogue, NLLDialogue):
        return dialogue.to_json()
    if isinstance(dialogue, Mapping):
        return dict(dialogue)
    if isinstance(dialogue, str):
        raise TypeError("a dialogue is a list of turns, not one string")
    if isinstance(dialogue, Sequence):
        return {"turns": list(dialogue)}
    raise TypeError(f"a dialogue must be an NLLDialogue, a mapping or a list of turn texts, not "
                    f"{type(dialogue).__name__}")


def _drop_none(body: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in body.items() if v is not None}


def plan_chunks(items: Sequence[dict[str, Any]], chunk_size: int,
                max_chunk_bytes: int | None = None) -> list[tuple[int, list[dict[str, Any]]]]:
    """Split items into ``(offset, chunk)`` runs of at most ``chunk_size`` items and (roughly, by
    their JSON size) ``max_chunk_bytes``; an item bigger than the byte bound travels alone."""
    if chunk_size < 1:
        raise ValueError("chunk_size must be at least 1")
    chunks: list[tuple[int, list[dict[str, Any]]]] = []
    current: list[dict[str, Any]] = []
    start, size = 0, 0
    for i, item in enumerate(items):
        n = len(json.dumps(item, ensure_ascii=False).encode()) + 1 if max_chunk_bytes else 0
        if current and (len(current) >= chunk_size or (max_chunk_bytes and size + n > max_chunk_bytes)):
            chunks.append((start, current))
            current, start, size = [], i, 0
        current.append(item)
        size += n
    if current:
        chunks.append((start, current))
    return chunks


class _BaseClient:
    """What the sync and async clients share: configuration, request bodies, retry decisions and
    response parsing."""

    def __init__(self, base_url: str | None = None, *, token: str | None = None,
                 timeout: float | httpx.Timeout | None = DEFAULT_TIMEOUT,
                 retry: RetryPolicy | None = None, max_concurrency: int = 8,
                 headers: Mapping[str, str] | None = None, retry_budget: RetryBudget | None = None,
                 priority: Priority | None = None):
        if max_concurrency < 1:
            raise ValueError("max_concurrency must be at least 1")
        if priority not in (None, "interactive", "bulk"):
            raise ValueError(f"priority must be 'interactive', 'bulk' or None, got {priority!r}")
        self.base_url = (base_url or os.environ.get("DIALSCORE_URL") or DEFAULT_URL).rstrip("/")
        token = token if token is not None else os.environ.get("DIALSCORE_TOKEN") or None
        self.headers: dict[str, str] = {"User-Agent": USER_AGENT, "Accept": "application/json"}
        if token:
            self.headers["Authorization"] = f"Bearer {token}"
        if priority is not None:
            self.headers[PRIORITY_HEADER] = priority
        self.headers.update(headers or {})
        self.timeout = timeout
        self.retry = retry or RetryPolicy()
        # Default: about max_attempts failed attempts per concurrent slot before retries stop, so
        # one call keeps its max_attempts and a replica restart under full concurrency is ridden
        # out, while a client whose calls keep failing stops multiplying its traffic.
        self.retry_budget = retry_budget if retry_budget is not None else RetryBudget(
            max_tokens=float(2 * self.retry.max_attempts * max_concurrency), token_ratio=0.5)
        self.max_concurrency = max_concurrency
        self._rng = random.Random()
        self._published_limits: PublishedLimits | None = None
        self._limits_fetched = False

    # -- limits --------------------------------------------------------------------------------

    def _limits_from(self, response: httpx.Response, attempt: int) -> PublishedLimits | None:
        """The limits in a GET /openapi.json response; None when it has none to give (a 4xx,
        a body that is not JSON, no ``info["x-limits"]`` or one that does not parse). A 5xx
        raises its error: the server is in trouble, not silent about its limits."""
        if response.status_code >= 500:
            raise self._status_error(response, attempt)
        if not response.is_success:
            return None
        try:
            info = response.json().get("info") or {}
            return PublishedLimits.model_validate(info["x-limits"])
        except (ValueError, AttributeError, KeyError, TypeError, ValidationError) as exc:
            log.info("GET /openapi.json publishes no usable limits (%s: %s)", type(exc).__name__, exc)
            return None

    def _chunk_bounds(self, chunk_size: int, max_chunk_bytes: int | None) -> tuple[int, int | None]:
        """`chunk_size` and `max_chunk_bytes` capped at the limits :meth:`limits` has read."""
        limits = self._published_limits
        if limits is None:
            return chunk_size, max_chunk_bytes
        if limits.max_body_bytes is not None:
            room = max(1, limits.max_body_bytes - BODY_ENVELOPE_BYTES)
            max_chunk_bytes = cap(max_chunk_bytes, room) if max_chunk_bytes else room
        return cap(chunk_size, limits.max_items), max_chunk_bytes

    def _nll_chunks(self, items: Sequence[ItemLike], chunk_size: int, max_chunk_bytes: int | None,
                    on_chunk: ChunkCallback | None
                    ) -> tuple[list[tuple[int, list[dict[str, Any]]]], ChunkResults[NLLResult]]:
        """``nll_many``'s chunks (within the limits read so far) and where their results land."""
        payloads = [_item_json(i) for i in items]
        chunks = plan_chunks(payloads, *self._chunk_bounds(chunk_size, max_chunk_bytes))
        return chunks, ChunkResults(len(payloads), on_chunk)

    # -- request bodies ------------------------------------------------------------------------

    @staticmethod
    def _nll_body(model: str, items: Sequence[ItemLike], return_tokens: bool,
                  extra_body: Mapping[str, Any] | None) -> dict[str, Any]:
        body = {"model": model, "items": [_item_json(i) for i in items], "return_tokens": return_tokens}
        body.update(extra_body or {})
        return body

    @staticmethod
    def _dialogues_body(model: str, dialogues: Sequence[DialogueLike], return_tokens: bool,
                        extra_body: Mapping[str, Any] | None) -> dict[str, Any]:
        body = {"model": model, "dialogues": [_nll_dialogue_json(d) for d in dialogues],
                "return_tokens": return_tokens}
        body.update(extra_body or {})
        return body

    @staticmethod
    def _contradiction_body(dialogues, model, mode, threshold, evidence_threshold,
                            extra_body) -> dict[str, Any]:
        body = _drop_none({"model": model, "mode": mode, "threshold": threshold,
                           "evidence_threshold": evidence_threshold})
        body["dialogues"] = [_dialogue_json(d) for d in dialogues]
        body.update(extra_body or {})
        return body

    @staticmethod
    def _rerank_body(context, candidates, options: Mapping[str, Any],
                     extra_body) -> dict[str, Any]:
        body = {"context": [_turn_json(t) for t in context], "candidates": list(candidates)}
        weights = options.get("weights")
        body.update(_drop_none({**options, "weights": dict(weights) if weights is not None else None}))
        body.update(extra_body or {})
        return body

    # -- retry decisions -----------------------------------------------------------------------

    def _delay_after_response(self, response: httpx.Response, attempt: int) -> float | None:
        """Seconds to wait before re-sending, None to stop here, or BUDGET_SPENT."""
        if not self.retry.retries(response):
            if response.status_code < 500 and response.status_code not in self.retry.retry_statuses:
                self.retry_budget.on_success()
            return None
        allowed = self.retry_budget.on_failure()
        if attempt >= self.retry.max_attempts:
            return None
        if not allowed:
            log.warning("%s %s -> %d; not retried: the retry budget is spent",
                        response.request.method, response.request.url.path, response.status_code)
            return BUDGET_SPENT
        retry_after = parse_retry_after(response.headers.get("Retry-After"))
        if retry_after is not None:
            delay = min(retry_after * (1 + self._rng.uniform(0, self.retry.retry_after_jitter)),
                        self.retry.max_retry_after)
        else:
            delay = self.retry.backoff(attempt, self._rng)
        log.warning("%s %s -> %d; retry %d/%d in %.2f s", response.request.method,
                    response.request.url.path, response.status_code, attempt,
                    self.retry.max_attempts - 1, delay)
        return delay

    def _delay_after_exception(self, exc: httpx.TransportError, request: httpx.Request,
                               attempt: int) -> float | None:
        if (not self.retry.retry_connection_errors
                or not isinstance(exc, RETRYABLE_TRANSPORT_ERRORS)
                or (isinstance(exc, (httpx.ReadTimeout, httpx.WriteTimeout))
                    and not self.retry.retry_read_timeouts)):
            return None
        allowed = self.retry_budget.on_failure()
        if attempt >= self.retry.max_attempts:
            return None
        if not allowed:
            log.warning("%s %s: %s; not retried: the retry budget is spent", request.method,
                        request.url.path, type(exc).__name__)
            return BUDGET_SPENT
        delay = self.retry.backoff(attempt, self._rng)
        log.warning("%s %s: %s (%s); retry %d/%d in %.2f s", request.method, request.url.path,
                    type(exc).__name__, exc, attempt, self.retry.max_attempts - 1, delay)
        return delay

    def _unreachable_delay(self, exc: httpx.ConnectError, request: httpx.Request,
                           state: Unreachable, attempts: int) -> float:
        """Seconds to wait after a refused connection, or raise
        :class:`~dialscore.errors.APIConnectionError` once the call has waited
        ``unreachable_wait_s`` in all (see :class:`RetryPolicy`)."""
        state.in_a_row += 1
        state.refused += 1
        if state.waited_s >= self.retry.unreachable_wait_s:
            raise APIConnectionError(
                f"{request.method} {request.url}: the service is unreachable: {state.refused} "
                f"connections refused over {state.waited_s:.1f} s of waiting (RetryPolicy."
                f"unreachable_wait_s={self.retry.unreachable_wait_s:g}); last: {exc}",
                request=request, attempts=attempts) from exc
        delay = self.retry.unreachable_backoff(state.in_a_row, self._rng)
        state.waited_s += delay
        log.warning("%s %s: connection refused (%s); waiting %.2f s for the service (%.1f of "
                    "%g s)", request.method, request.url.path, exc, delay, state.waited_s,
                    self.retry.unreachable_wait_s)
        return delay

    def _next_delay(self, outcome: Outcome, request: httpx.Request, attempt: int,
                    state: Unreachable) -> tuple[float | None, int]:
        """The delay before the next send (None: `outcome` is the answer) and the attempts
        counted so far: a refused connection does not count while the call waits for the
        service to be reachable (:attr:`RetryPolicy.unreachable_wait_s`)."""
        if isinstance(outcome, httpx.ConnectError) and self.retry.unreachable_wait_s > 0:
            return self._unreachable_delay(outcome, request, state, attempt + 1), attempt
        state.in_a_row = 0
        return self._retry_delay(outcome, request, attempt + 1), attempt + 1

    def _retry_delay(self, outcome: Outcome, request: httpx.Request, attempt: int) -> float | None:
        """Seconds to wait before sending `request` again after attempt number `attempt` gave
        `outcome`; None when `outcome` (then a response) is the answer to return. Raises the error
        to give up with: the connection error after the last try, or
        :class:`~dialscore.errors.RetryBudgetExhaustedError`."""
        if isinstance(outcome, httpx.TransportError):
            delay = self._delay_after_exception(outcome, request, attempt)
            if delay is None:
                raise self._connection_error(outcome, request, attempt) from outcome
            if delay == BUDGET_SPENT:
                raise self._budget_error(request, attempt) from self._connection_error(
                    outcome, request, attempt)
            return delay
        delay = self._delay_after_response(outcome, attempt)
        if delay == BUDGET_SPENT:
            raise self._budget_error(request, attempt, outcome) from self._status_error(
                outcome, attempt)
        return delay

    def _budget_error(self, request: httpx.Request, attempt: int,
                      response: httpx.Response | None = None) -> RetryBudgetExhaustedError:
        what = f"HTTP {response.status_code}" if response is not None else "connection failure"
        return RetryBudgetExhaustedError(
            f"{request.method} {request.url}: {what} not retried: this client's retry budget is "
            f"spent ({self.retry_budget.tokens:.1f} of {self.retry_budget.max_tokens:g} tokens; most "
            "recent attempts failed). The service is failing or shedding load: stop and resume "
            "later.", request=request, response=response, attempts=attempt)

    @staticmethod
    def _connection_error(exc: httpx.TransportError, request: httpx.Request,
                          attempt: int) -> APIConnectionError:
        cls = APITimeoutError if isinstance(exc, httpx.TimeoutException) else APIConnectionError
        return cls(f"{request.method} {request.url}: {type(exc).__name__}: {exc}",
                   request=request, attempts=attempt)

    # -- responses -----------------------------------------------------------------------------

    @staticmethod
    def _status_error(response: httpx.Response, attempt: int) -> APIStatusError:
        type_, message, param = None, None, None
        try:
            body = response.json()
        except ValueError:
            body = None
        if isinstance(body, dict) and isinstance(body.get("error"), dict):
            err = body["error"]
            type_ = err.get("type") if isinstance(err.get("type"), str) else None
            message = err.get("message") if isinstance(err.get("message"), str) else None
            param = err.get("param") if isinstance(err.get("param"), str) else None
        if message is None:
            text = response.text.strip()
            message = (text[:300] or response.reason_phrase or "error")
        cls = error_class(response.status_code, type_)
        return cls(message, request=response.request, response=response, param=param,
                   attempts=attempt, type=type_ or cls.error_type,
                   retry_after=parse_retry_after(response.headers.get("Retry-After")))

    def _parse(self, response: httpx.Response, cls: type[R], attempt: int) -> R:
        if not response.is_success:
            raise self._status_error(response, attempt)
        try:
            return cls.model_validate(response.json())
        except (ValueError, ValidationError) as exc:
            raise ResponseValidationError(
                f"{response.request.method} {response.request.url.path}: the response does not "
                f"parse as {cls.__name__}: {exc}", request=response.request, response=response,
                attempts=attempt) from exc

    @staticmethod
    def _check_count(response: NLLResponse, n: int, request: httpx.Request | None) -> NLLResponse:
        if len(response.results) != n:
            raise ResponseValidationError(
                f"sent {n} items, got {len(response.results)} results", request=request)
        return response

    @staticmethod
    def _check_dialogues(response: NLLDialoguesResponse, n: int) -> NLLDialoguesResponse:
        if len(response.results) != n:
            raise ResponseValidationError(
                f"sent {n} dialogues, got {len(response.results)} results", request=None)
        return response

    @staticmethod
    def _health(live: httpx.Response, ready: httpx.Response) -> Health:
        try:
            detail = ready.json()
        except ValueError:
            detail = ready.text or None
        return Health(alive=live.is_success, ready=ready.is_success, detail=detail)

    def _ready(self, health: Health, deadline: float, timeout: float) -> bool:
        """Whether ``wait_ready`` is done polling: True when `health` is ready; TimeoutError
        once the monotonic clock has passed `deadline`."""
        if health.ready:
            return True
        if time.monotonic() >= deadline:
            raise TimeoutError(f"{self.base_url} not ready after {timeout:.0f} s: "
                               f"{health.error or health.detail}")
        return False


class DialscoreClient(_BaseClient):
    """Synchronous client. ``nll_many`` sends its chunks from a thread pool of
    ``max_concurrency`` threads (``httpx.Client`` is thread-safe).

    Arguments: ``base_url`` (default ``$DIALSCORE_URL`` or ``http://127.0.0.1:8000``),
    ``token`` (default ``$DIALSCORE_TOKEN``), ``timeout`` (seconds or ``httpx.Timeout``),
    ``retry`` (:class:`RetryPolicy`), ``max_concurrency``, ``headers``, ``transport``,
    ``retry_budget`` (:class:`~dialscore.retry_budget.RetryBudget`; pass one instance to several
    clients to share it), ``priority`` (``"bulk"``, ``"interactive"`` or None: the lane every
    request asks for; see the module docstring).
    """

    def __init__(self, base_url: str | None = None, *, token: str | None = None,
                 timeout: float | httpx.Timeout | None = DEFAULT_TIMEOUT,
                 retry: RetryPolicy | None = None, max_concurrency: int = 8,
                 headers: Mapping[str, str] | None = None,
                 transport: httpx.BaseTransport | None = None, retry_budget: RetryBudget | None = None,
                 priority: Priority | None = None):
        super().__init__(base_url, token=token, timeout=timeout, retry=retry,
                         max_concurrency=max_concurrency, headers=headers, retry_budget=retry_budget,
                         priority=priority)
        #: The transport given (None: httpx's default); the sync entry points reuse it.
        self.transport = transport
        self._limit = threading.BoundedSemaphore(max_concurrency)
        self._limits_fetch_lock = threading.Lock()
        self._http = httpx.Client(
            base_url=self.base_url, headers=self.headers, timeout=timeout, transport=transport,
            limits=httpx.Limits(max_connections=max(max_concurrency, 10)))
        self._sleep: Callable[[float], None] = time.sleep

    # -- lifecycle -----------------------------------------------------------------------------

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> DialscoreClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- sending -------------------------------------------------------------------------------

    def _send(self, method: str, path: str, json: Any = None) -> tuple[httpx.Response, int]:
        """Send with retries; the last response and the number of attempts it took."""
        request = self._http.build_request(method, path, json=json)
        attempt, unreachable = 0, Unreachable()
        while True:
            outcome: Outcome
            try:
                with self._limit:
                    outcome = self._http.send(request)
            except httpx.TransportError as exc:
                outcome = exc
            delay, attempt = self._next_delay(outcome, request, attempt, unreachable)
            if delay is None:
                return outcome, attempt  # type: ignore[return-value]
            if isinstance(outcome, httpx.Response):
                outcome.close()
            self._sleep(delay)

    def _request(self, method: str, path: str, cls: type[R], json: Any = None) -> R:
        response, attempt = self._send(method, path, json)
        return self._parse(response, cls, attempt)

    # -- endpoints -----------------------------------------------------------------------------

    def models(self) -> list[ModelCard]:
        """``GET /v1/models``: the served models, their provenance and dialogue formats."""
        return self._request("GET", "/v1/models", ModelList).models

    def limits(self) -> PublishedLimits | None:
        """The deployment's request limits from ``GET /openapi.json`` (``info["x-limits"]``),
        read on the first call and cached for the client's life; None when it publishes none
        (see :class:`~dialscore.types.PublishedLimits`). Once read, :meth:`nll_many` keeps its
        chunks within them."""
        with self._limits_fetch_lock:
            if not self._limits_fetched:
                self._published_limits = self._limits_from(*self._send("GET", "/openapi.json"))
                self._limits_fetched = True
            return self._published_limits

    def nll(self, model: str, items: Sequence[ItemLike], *, return_tokens: bool = False,
            extra_body: Mapping[str, Any] | None = None) -> NLLResponse:
        """``POST /v1/nll``: one request. Results keep the order of ``items``."""
        body = self._nll_body(model, items, return_tokens, extra_body)
        return self._check_count(self._request("POST", "/v1/nll", NLLResponse, body), len(items), None)

    def nll_many(self, model: str, items: Sequence[ItemLike], *, chunk_size: int = 64,
                 max_chunk_bytes: int | None = 1_000_000, return_tokens: bool = False,
                 on_chunk: ChunkCallback | None = None) -> list[NLLResult]:
        """Score any number of items in concurrent requests of bounded size; results in item order.

        ``on_chunk(offset, results)`` runs in the calling thread as each chunk finishes (in
        completion order), e.g. to save progress. On an error the chunks not yet started are
        cancelled and the error is raised, its ``param`` naming the item's index in ``items``.
        """
        chunks, landed = self._nll_chunks(items, chunk_size, max_chunk_bytes, on_chunk)

        def send(part: list[dict[str, Any]]) -> list[NLLResult]:
            return self.nll(model, part, return_tokens=return_tokens).results

        run_chunks(lambda offset, chunk: send_halving(send, chunk, "items", offset), chunks,
                   self.max_concurrency, landed.land)
        return landed.results()

    def score_dialogues(self, model: str, dialogues: Sequence[DialogueLike], *,
                        return_tokens: bool = False,
                        extra_body: Mapping[str, Any] | None = None) -> NLLDialoguesResponse:
        """``POST /v1/nll/dialogues``: one request. Every scored turn k of a dialogue (every
        turn, the turns of its ``speaker`` or its ``score_turns``) gets the numbers of the
        /v1/nll item ``{"context": turns[:k], "knowledge": ..., "target": turns[k]}``, and each
        dialogue its token-weighted mean NLL over them; results keep the order of
        ``dialogues``. A dialogue is an :class:`~dialscore.types.NLLDialogue`, a mapping of
        its shape, or a list of turn texts. Each scored turn counts as one item against
        ``max_items`` (a 413 naming ``dialogues`` when they are too many)."""
        body = self._dialogues_body(model, dialogues, return_tokens, extra_body)
        return self._check_dialogues(
            self._request("POST", "/v1/nll/dialogues", NLLDialoguesResponse, body), len(dialogues))

    def contradiction(self, dialogues: Sequence[Mapping[str, Any] | Sequence[TurnLike]], *,
                      model: str | None = None, mode: str | None = None,
                      threshold: float | None = None, evidence_threshold: float | None = None,
                      extra_body: Mapping[str, Any] | None = None) -> ContradictionResponse:
        """``POST /v1/contradiction``. A dialogue is a list of turns or ``{"turns": [...]}``; a
        turn is a :class:`~dialscore.types.Turn` or ``{"speaker", "text", "id"?}``."""
        body = self._contradiction_body(dialogues, model, mode, threshold, evidence_threshold, extra_body)
        return self._request("POST", "/v1/contradiction", ContradictionResponse, body)

    def rerank(self, context: Sequence[TurnLike], candidates: Sequence[str], *,
               top_n: int | None = None, nll_model: str | None = None,
               weights: Mapping[str, float] | None = None, speaker: str | int | None = None,
               mode: str | None = None, model: str | None = None, threshold: float | None = None,
               evidence_threshold: float | None = None, priority: int | None = None,
               extra_body: Mapping[str, Any] | None = None) -> RerankResponse:
        """``POST /v1/rerank``: candidates scored against the context, best first. Options left
        at None take the server's defaults (``speaker``: who says the candidates, default the
        most recent context speaker other than the last; ``mode``: structured/unstructured;
        ``model``: the detector; ``threshold``/``evidence_threshold`` as in /v1/contradiction;
        ``priority``: vLLM's request priority, above 0 asks for the bulk lane)."""
        body = self._rerank_body(context, candidates, {
            "top_n": top_n, "nll_model": nll_model, "weights": weights, "speaker": speaker,
            "mode": mode, "model": model, "threshold": threshold,
            "evidence_threshold": evidence_threshold, "priority": priority}, extra_body)
        return self._request("POST", "/v1/rerank", RerankResponse, body)

    def health(self) -> Health:
        """``GET /healthz`` and ``GET /readyz``, once each, never retried and never raising:
        an unreachable server gives ``alive=False`` with the reason in ``error``."""
        try:
            live = self._http.get("/healthz")
            ready = self._http.get("/readyz")
        except httpx.TransportError as exc:
            return Health(alive=False, ready=False, error=f"{type(exc).__name__}: {exc}")
        return self._health(live, ready)

    def wait_ready(self, timeout: float = 120.0, interval: float = 0.5) -> Health:
        """Poll :meth:`health` until the server is ready; ``TimeoutError`` after ``timeout`` s."""
        deadline = time.monotonic() + timeout
        while not self._ready(health := self.health(), deadline, timeout):
            self._sleep(interval)
        return health


class AsyncDialscoreClient(_BaseClient):
    """Asynchronous client, method for method the same as :class:`DialscoreClient`; at most
    ``max_concurrency`` requests are in flight (an ``asyncio.Semaphore``)."""

    def __init__(self, base_url: str | None = None, *, token: str | None = None,
                 timeout: float | httpx.Timeout | None = DEFAULT_TIMEOUT,
                 retry: RetryPolicy | None = None, max_concurrency: int = 8,
                 headers: Mapping[str, str] | None = None,
                 transport: httpx.AsyncBaseTransport | None = None, retry_budget: RetryBudget | None = None,
                 priority: Priority | None = None):
        super().__init__(base_url, token=token, timeout=timeout, retry=retry,
                         max_concurrency=max_concurrency, headers=headers, retry_budget=retry_budget,
                         priority=priority)
        #: The transport given (None: httpx's default).
        self.transport = transport
        self._limit = asyncio.Semaphore(max_concurrency)
        self._limits_fetch_lock = asyncio.Lock()
        self._http = httpx.AsyncClient(
            base_url=self.base_url, headers=self.headers, timeout=timeout, transport=transport,
            limits=httpx.Limits(max_connections=max(max_concurrency, 10)))
        self._sleep: Callable[[float], Any] = asyncio.sleep

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncDialscoreClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def _send(self, method: str, path: str, json: Any = None) -> tuple[httpx.Response, int]:
        """Send with retries; the last response and the number of attempts it took."""
        request = self._http.build_request(method, path, json=json)
        attempt, unreachable = 0, Unreachable()
        while True:
            outcome: Outcome
            try:
                async with self._limit:
                    outcome = await self._http.send(request)
            except httpx.TransportError as exc:
                outcome = exc
            delay, attempt = self._next_delay(outcome, request, attempt, unreachable)
            if delay is None:
                return outcome, attempt  # type: ignore[return-value]
            if isinstance(outcome, httpx.Response):
                await outcome.aclose()
            await self._sleep(delay)

    async def _request(self, method: str, path: str, cls: type[R], json: Any = None) -> R:
        response, attempt = await self._send(method, path, json)
        return self._parse(response, cls, attempt)

    async def models(self) -> list[ModelCard]:
        """``GET /v1/models``: the served models, their provenance and dialogue formats."""
        return (await self._request("GET", "/v1/models", ModelList)).models

    async def limits(self) -> PublishedLimits | None:
        """``GET /openapi.json``'s published limits, read once and cached (see
        :meth:`DialscoreClient.limits`)."""
        async with self._limits_fetch_lock:
            if not self._limits_fetched:
                self._published_limits = self._limits_from(*await self._send("GET", "/openapi.json"))
                self._limits_fetched = True
            return self._published_limits

    async def nll(self, model: str, items: Sequence[ItemLike], *, return_tokens: bool = False,
                  extra_body: Mapping[str, Any] | None = None) -> NLLResponse:
        """``POST /v1/nll``: one request. Results keep the order of ``items``."""
        body = self._nll_body(model, items, return_tokens, extra_body)
        return self._check_count(await self._request("POST", "/v1/nll", NLLResponse, body),
                                 len(items), None)

    async def nll_many(self, model: str, items: Sequence[ItemLike], *, chunk_size: int = 64,
                       max_chunk_bytes: int | None = 1_000_000, return_tokens: bool = False,
                       on_chunk: ChunkCallback | None = None) -> list[NLLResult]:
        """As :meth:`DialscoreClient.nll_many`: at most ``max_concurrency`` chunks in progress,
        as tasks; on an error the others are cancelled and the error is raised."""
        chunks, landed = self._nll_chunks(items, chunk_size, max_chunk_bytes, on_chunk)

        async def send(part: list[dict[str, Any]]) -> list[NLLResult]:
            return (await self.nll(model, part, return_tokens=return_tokens)).results

        await arun_chunks(lambda offset, chunk: asend_halving(send, chunk, "items", offset),
                          chunks, self.max_concurrency, landed.land)
        return landed.results()

    async def score_dialogues(self, model: str, dialogues: Sequence[DialogueLike], *,
                              return_tokens: bool = False,
                              extra_body: Mapping[str, Any] | None = None) -> NLLDialoguesResponse:
        """``POST /v1/nll/dialogues`` (see :meth:`DialscoreClient.score_dialogues`)."""
        body = self._dialogues_body(model, dialogues, return_tokens, extra_body)
        return self._check_dialogues(
            await self._request("POST", "/v1/nll/dialogues", NLLDialoguesResponse, body),
            len(dialogues))

    async def contradiction(self, dialogues: Sequence[Mapping[str, Any] | Sequence[TurnLike]], *,
                            model: str | None = None, mode: str | None = None,
                            threshold: float | None = None, evidence_threshold: float | None = None,
                            extra_body: Mapping[str, Any] | None = None) -> ContradictionResponse:
        """``POST /v1/contradiction`` (see :meth:`DialscoreClient.contradiction`)."""
        body = self._contradiction_body(dialogues, model, mode, threshold, evidence_threshold, extra_body)
        return await self._request("POST", "/v1/contradiction", ContradictionResponse, body)

    async def rerank(self, context: Sequence[TurnLike], candidates: Sequence[str], *,
                     top_n: int | None = None, nll_model: str | None = None,
                     weights: Mapping[str, float] | None = None, speaker: str | int | None = None,
                     mode: str | None = None, model: str | None = None,
                     threshold: float | None = None, evidence_threshold: float | None = None,
                     priority: int | None = None,
                     extra_body: Mapping[str, Any] | None = None) -> RerankResponse:
        """``POST /v1/rerank`` (see :meth:`DialscoreClient.rerank`)."""
        body = self._rerank_body(context, candidates, {
            "top_n": top_n, "nll_model": nll_model, "weights": weights, "speaker": speaker,
            "mode": mode, "model": model, "threshold": threshold,
            "evidence_threshold": evidence_threshold, "priority": priority}, extra_body)
        return await self._request("POST", "/v1/rerank", RerankResponse, body)

    async def health(self) -> Health:
        """``GET /healthz`` and ``GET /readyz`` (see :meth:`DialscoreClient.health`)."""
        try:
            live = await self._http.get("/healthz")
            ready = await self._http.get("/readyz")
        except httpx.TransportError as exc:
            return Health(alive=False, ready=False, error=f"{type(exc).__name__}: {exc}")
        return self._health(live, ready)

    async def wait_ready(self, timeout: float = 120.0, interval: float = 0.5) -> Health:
        """Poll :meth:`health` until the server is ready; ``TimeoutError`` after ``timeout`` s."""
        deadline = time.monotonic() + timeout
        while not self._ready(health := await self.health(), deadline, timeout):
            await self._sleep(interval)
        return health
