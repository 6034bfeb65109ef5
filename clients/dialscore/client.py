"""HTTP clients for the dialscore service: :class:`DialscoreClient` (sync) and
:class:`AsyncDialscoreClient` (asyncio), with the same methods.

Built like httpx's own ``Client``/``AsyncClient``: what the two share is written once and
without I/O (request bodies in :mod:`dialscore.request_bodies`, retry decisions in
:mod:`dialscore.retrying`, the reading of responses into typed results and errors in
:mod:`dialscore.responses`); the two clients only differ in how they send and sleep. Example::

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
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, TypeVar

import httpx
from pydantic import BaseModel

from dialscore import __version__, responses
from dialscore.batching import (
    ChunkResults, arun_chunks, asend_halving, chunk_bounds, plan_chunks, run_chunks, send_halving,
)
from dialscore.model_card import ModelCard
from dialscore.request_bodies import (
    DialogueLike,
    ItemLike,
    TurnLike,
    contradiction_body,
    dialogues_body,
    item_json,
    nll_body,
    rerank_body,
)
from dialscore.retry_budget import RetryBudget
from dialscore.retry_policy import RetryPolicy
from dialscore.retrying import Outcome, Retrier, Unreachable
from dialscore.types import (
    ContradictionResponse,
    Health,
    ModelList,
    NLLDialoguesResponse,
    NLLResponse,
    NLLResult,
    PublishedLimits,
    RerankResponse,
)

__all__ = ["AsyncDialscoreClient", "DialscoreClient", "RetryPolicy", "DEFAULT_TIMEOUT", "DEFAULT_URL",
           "PRIORITY_HEADER", "Priority"]

DEFAULT_URL = "http://127.0.0.1:8000"
#: Scoring a big chunk on CPU can take a while: generous read timeout, short connect timeout.
DEFAULT_TIMEOUT = httpx.Timeout(120.0, connect=10.0)
USER_AGENT = f"dialscore-client/{__version__}"
#: The request header that asks for a priority lane (the service's contract/priority.py).
PRIORITY_HEADER = "X-Dialscore-Priority"
#: A lane a client may ask for.
Priority = Literal["interactive", "bulk"]

R = TypeVar("R", bound=BaseModel)
#: ``on_chunk(offset, results)``: called once per finished chunk, in completion order; ``offset``
#: is the index of the chunk's first item in the ``items`` given to ``nll_many``.
ChunkCallback = Callable[[int, list[NLLResult]], None]


class _BaseClient:
    """What the sync and async clients share: configuration (base URL, headers, timeout, retry
    policy and budget, concurrency), the published limits once read, and the planning of
    ``nll_many``'s chunks. Request bodies are :mod:`dialscore.request_bodies`', retry decisions
    :mod:`dialscore.retrying`'s, the reading of responses :mod:`dialscore.responses`'."""

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
        policy = retry or RetryPolicy()
        # Default: about max_attempts failed attempts per concurrent slot before retries stop, so
        # one call keeps its max_attempts and a replica restart under full concurrency is ridden
        # out, while a client whose calls keep failing stops multiplying its traffic.
        budget = retry_budget if retry_budget is not None else RetryBudget(
            max_tokens=float(2 * policy.max_attempts * max_concurrency), token_ratio=0.5)
        self._retrier = Retrier(policy, budget)
        self.max_concurrency = max_concurrency
        self._published_limits: PublishedLimits | None = None
        self._limits_fetched = False

    @property
    def retry(self) -> RetryPolicy:
        """The client's retry policy."""
        return self._retrier.policy

    @property
    def retry_budget(self) -> RetryBudget:
        """The retry budget every call of this client draws on (shared when it was given)."""
        return self._retrier.budget

    def _nll_chunks(self, items: Sequence[ItemLike], chunk_size: int, max_chunk_bytes: int | None,
                    on_chunk: ChunkCallback | None
                    ) -> tuple[list[tuple[int, list[dict[str, Any]]]], ChunkResults[NLLResult]]:
        """``nll_many``'s chunks (within the limits read so far) and where their results land."""
        payloads = [item_json(i) for i in items]
        chunks = plan_chunks(payloads, *chunk_bounds(self._published_limits, chunk_size,
                                                     max_chunk_bytes))
        return chunks, ChunkResults(len(payloads), on_chunk)

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
            delay, attempt = self._retrier.next_delay(outcome, request, attempt, unreachable)
            if delay is None:
                return outcome, attempt  # type: ignore[return-value]
            if isinstance(outcome, httpx.Response):
                outcome.close()
            self._sleep(delay)

    def _request(self, method: str, path: str, cls: type[R], json: Any = None) -> R:
        response, attempt = self._send(method, path, json)
        return responses.parse(response, cls, attempt)

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
                self._published_limits = responses.limits(*self._send("GET", "/openapi.json"))
                self._limits_fetched = True
            return self._published_limits

    def nll(self, model: str, items: Sequence[ItemLike], *, return_tokens: bool = False,
            extra_body: Mapping[str, Any] | None = None) -> NLLResponse:
        """``POST /v1/nll``: one request. Results keep the order of ``items``."""
        body = nll_body(model, items, return_tokens, extra_body)
        return responses.check_count(self._request("POST", "/v1/nll", NLLResponse, body), len(items), None)

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
        body = dialogues_body(model, dialogues, return_tokens, extra_body)
        return responses.check_dialogues(
            self._request("POST", "/v1/nll/dialogues", NLLDialoguesResponse, body), len(dialogues))

    def contradiction(self, dialogues: Sequence[Mapping[str, Any] | Sequence[TurnLike]], *,
                      model: str | None = None, mode: str | None = None,
                      threshold: float | None = None, evidence_threshold: float | None = None,
                      extra_body: Mapping[str, Any] | None = None) -> ContradictionResponse:
        """``POST /v1/contradiction``. A dialogue is a list of turns or ``{"turns": [...]}``; a
        turn is a :class:`~dialscore.types.Turn` or ``{"speaker", "text", "id"?}``."""
        body = contradiction_body(dialogues, model, mode, threshold, evidence_threshold, extra_body)
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
        body = rerank_body(context, candidates, {
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
        return responses.health(live, ready)

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
            delay, attempt = self._retrier.next_delay(outcome, request, attempt, unreachable)
            if delay is None:
                return outcome, attempt  # type: ignore[return-value]
            if isinstance(outcome, httpx.Response):
                await outcome.aclose()
            await self._sleep(delay)

    async def _request(self, method: str, path: str, cls: type[R], json: Any = None) -> R:
        response, attempt = await self._send(method, path, json)
        return responses.parse(response, cls, attempt)

    async def models(self) -> list[ModelCard]:
        """``GET /v1/models``: the served models, their provenance and dialogue formats."""
        return (await self._request("GET", "/v1/models", ModelList)).models

    async def limits(self) -> PublishedLimits | None:
        """``GET /openapi.json``'s published limits, read once and cached (see
        :meth:`DialscoreClient.limits`)."""
        async with self._limits_fetch_lock:
            if not self._limits_fetched:
                self._published_limits = responses.limits(*await self._send("GET", "/openapi.json"))
                self._limits_fetched = True
            return self._published_limits

    async def nll(self, model: str, items: Sequence[ItemLike], *, return_tokens: bool = False,
                  extra_body: Mapping[str, Any] | None = None) -> NLLResponse:
        """``POST /v1/nll``: one request. Results keep the order of ``items``."""
        body = nll_body(model, items, return_tokens, extra_body)
        return responses.check_count(await self._request("POST", "/v1/nll", NLLResponse, body),
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
        body = dialogues_body(model, dialogues, return_tokens, extra_body)
        return responses.check_dialogues(
            await self._request("POST", "/v1/nll/dialogues", NLLDialoguesResponse, body),
            len(dialogues))

    async def contradiction(self, dialogues: Sequence[Mapping[str, Any] | Sequence[TurnLike]], *,
                            model: str | None = None, mode: str | None = None,
                            threshold: float | None = None, evidence_threshold: float | None = None,
                            extra_body: Mapping[str, Any] | None = None) -> ContradictionResponse:
        """``POST /v1/contradiction`` (see :meth:`DialscoreClient.contradiction`)."""
        body = contradiction_body(dialogues, model, mode, threshold, evidence_threshold, extra_body)
        return await self._request("POST", "/v1/contradiction", ContradictionResponse, body)

    async def rerank(self, context: Sequence[TurnLike], candidates: Sequence[str], *,
                     top_n: int | None = None, nll_model: str | None = None,
                     weights: Mapping[str, float] | None = None, speaker: str | int | None = None,
                     mode: str | None = None, model: str | None = None,
                     threshold: float | None = None, evidence_threshold: float | None = None,
                     priority: int | None = None,
                     extra_body: Mapping[str, Any] | None = None) -> RerankResponse:
        """``POST /v1/rerank`` (see :meth:`DialscoreClient.rerank`)."""
        body = rerank_body(context, candidates, {
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
        return responses.health(live, ready)

    async def wait_ready(self, timeout: float = 120.0, interval: float = 0.5) -> Health:
        """Poll :meth:`health` until the server is ready; ``TimeoutError`` after ``timeout`` s."""
        deadline = time.monotonic() + timeout
        while not self._ready(health := await self.health(), deadline, timeout):
            await self._sleep(interval)
        return health
