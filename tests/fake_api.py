"""The dialscore API in-process over fake engines, for server-side tests: the server's own
FastAPI app, routers, protocol schemas, servings (scheduling layer included), rerank serving and
gateway backend (:class:`~dialscore_server.directory.ModelDirectory`). No model, no Ray, no
socket.

Only the engines are fake (:class:`FakeNLLEngine`, :class:`FakeDetector`); every request and
response goes through the real validation, limits, error mapping and serialization, so the fake
cannot drift from the server. What it lacks is Serve itself: no merged engine calls across
requests and no process hop (the deployment tests cover those).

    api = FakeAPI()                                   # models: FAKE_CARDS
    client = DialscoreClient("http://fake", transport=api.transport())
    api.nll_items                                     # [(model, item JSON), ...] scored so far
    api.bodies["/v1/rerank"]                          # every JSON body POSTed there, in order

The fake NLL of an item is :func:`hash_nll` (deterministic, in [1, 5)) unless a `scorer` is given;
the fake classifier's contradiction probability of a (premise, hypothesis) pair is
:func:`negation_probability` unless a `classifier` is given.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from dialscore.client import AsyncDialscoreClient
from dialscore.model_card import ModelCard
from dialscore_server.scheduling.planner import BatchStats
from dialscore_server.checkpoints.registry import ModelConfig
from dialscore_server.contract.errors import InputError, ServiceError
from dialscore_server.contract.limits import Limits
from dialscore_server.contract.options import ServingOptions
from dialscore_server.contradiction.engine.engine import ContradictionDetector
from dialscore_server.contradiction.serving import ContradictionServing
from dialscore_server.contract.reply import Reply
from dialscore_server.gateway.app import create_app
from dialscore_server.directory import ModelDirectory
from dialscore_server.nll.completions.serving import CompletionCall, Completed
from dialscore_server.nll.engine.encoding import EncodedItem, NLLItem
from dialscore_server.nll.engine.engine import NLLResult
from dialscore_server.nll.tokenizer.serving import TokenizerCall
from dialscore_server.nll.serving import NLLServing, Scored
from dialscore_server.rerank.serving import RerankServing
from dialscore_server.scheduling.cancellation import CallGuard
from fake_models import (
    FAKE_CARDS, PairClassifier, RequestLog, Scorer, hash_nll, negation_probability,
)

__all__ = ["FAKE_CARDS", "FakeAPI", "app_transport", "error", "hash_nll", "negation_probability"]


def item_json(item: NLLItem) -> dict[str, Any]:
    """The item as the client sent it (fields left out stay out)."""
    out: dict[str, Any] = {"target": item.target}
    if item.context is not None:
        out["context"] = list(item.context)
    for name in ("knowledge", "source"):
        if getattr(item, name) is not None:
            out[name] = getattr(item, name)
    return out


def _word_ids(text: str) -> tuple[int, ...]:
    return tuple(int.from_bytes(hashlib.sha256(w.encode()).digest()[:2], "big") for w in text.split())


@dataclass(frozen=True)
class FakeEncoded(EncodedItem):
    """An encoded item that remembers what it was (the fake scorer sees the item's JSON)."""

    item: dict[str, Any] | None = None


class FakeNLLEngine:
    """An NLL engine without a model: one token per word of the target plus eos; every token's
    NLL is ``scorer(model, item)``. Implements the engine protocol (a deployment can serve it)."""

    def __init__(self, card: ModelCard, scorer: Scorer = hash_nll):
        self._card = card
        self.scorer = scorer

    @classmethod
    def from_options(cls, config: ModelConfig, options: ServingOptions) -> FakeNLLEngine:
        return cls(ModelCard(name=config.name, family=config.family, source=config.source,
                             revision="fake", max_length=config.max_length, dtype=config.dtype,
                             device="cpu", stand_in=True, format=config.format))

    def card(self) -> ModelCard:
        return self._card

    def check_health(self) -> None:
        pass

    def close(self) -> None:
        pass

    def encode(self, item: NLLItem) -> FakeEncoded:
        target = _word_ids(item.target) + (0,)
        if len(target) == 1:
            raise InputError("target is empty: there is no token to score", "target")
        source = _word_ids(" ".join(item.context or ()) + " " + (item.knowledge or item.source or ""))
        return FakeEncoded(source or (0,), target, False, item=item_json(item))

    def positions(self, item: FakeEncoded, after: FakeEncoded | None = None) -> int:
        return item.cost  # no prefix reuse: every item computes its whole input

    def score_encoded(self, encoded: Sequence[FakeEncoded], guard: CallGuard | None = None
                      ) -> tuple[list[NLLResult | None], BatchStats]:
        results: list[NLLResult | None] = []
        for i, e in enumerate(encoded):
            if guard is not None and not guard.wanted(i):
                results.append(None)  # as the real engine: an item nobody wants is left out
                continue
            nll = self.scorer(self._card.name, e.item or {})
            results.append(NLLResult(nll=nll, token_nlls=[nll] * len(e.target_ids),
                                     token_ids=list(e.target_ids), num_tokens=len(e.target_ids),
                                     source_tokens=len(e.source_ids), truncated=False))
        tokens = sum(e.cost for e in encoded)
        return results, BatchStats(items=len(encoded), batches=1, forward_passes=1,
                                   item_tokens=tokens, real_tokens=tokens, padded_tokens=tokens)

    def token_strings(self, ids: Sequence[int]) -> list[str]:
        return [f"<{i}>" for i in ids]


class FakeDetector(ContradictionDetector):
    """The real detector (pairing, verdicts, evidence) over a fake pair classifier (default
    :func:`negation_probability`)."""

    def __init__(self, card: ModelCard, classifier: PairClassifier = negation_probability):
        super().__init__(classifier=lambda pairs: [classifier(p, h) for p, h in pairs])
        self._card = card

    @classmethod
    def from_options(cls, config: ModelConfig, options: ServingOptions) -> FakeDetector:
        return cls(ModelCard(name=config.name, family="classifier", source=config.source,
                             revision="fake", max_length=config.max_length, stand_in=True,
                             labels=["contradiction", "neutral", "entailment"],
                             contradiction_index=0))

    def card(self) -> ModelCard:
        return self._card


class WatchedNLL:
    """An in-process NLL service that runs `hook(items)` before each scoring request (counting,
    or raising a ServiceError to play a failing deployment), then its serving's answer."""

    def __init__(self, serving: NLLServing, hook: Callable[[Sequence[NLLItem]], None]):
        self.serving, self.hook = serving, hook

    async def score(self, items: Sequence[NLLItem], return_tokens: bool = False,
                    lane: str = "interactive") -> Reply[Scored]:
        try:
            self.hook(items)
        except ServiceError as exc:
            return Reply(error=exc)
        return await self.serving.score(items, return_tokens, lane)  # type: ignore[arg-type]

    async def complete(self, call: CompletionCall, lane: str = "interactive") -> Reply[Completed]:
        return await self.serving.complete(call, lane)  # type: ignore[arg-type]

    async def tokenizer(self, call: TokenizerCall) -> Reply[object]:
        return await self.serving.tokenizer(call)

    async def card(self) -> ModelCard:
        return await self.serving.card()


class _Transport(httpx.BaseTransport, httpx.AsyncBaseTransport):
    """An httpx transport for sync and async clients alike: the ASGI app runs on the caller's
    loop (async) or on a private loop thread (sync)."""

    def __init__(self, app: Any, seen: list[str], bodies: dict[str, list[Any]]):
        self._asgi = httpx.ASGITransport(app=app)
        self._seen, self._bodies = seen, bodies
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lock = threading.Lock()

    def _record(self, request: httpx.Request) -> None:
        self._seen.append(request.url.path)
        if request.method == "POST":
            try:
                body = json.loads(request.read())
            except ValueError:  # not JSON: the server's 400 is what the test looks at
                return
            self._bodies.setdefault(request.url.path, []).append(body)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self._record(request)
        return await self._asgi.handle_async_request(request)

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self._record(request)
        with self._lock:
            if self._loop is None:
                self._loop = asyncio.new_event_loop()
                threading.Thread(target=self._loop.run_forever, daemon=True).start()

        async def go() -> httpx.Response:
            sent = httpx.Request(request.method, request.url, headers=request.headers,
                                 content=request.read())
            response = await self._asgi.handle_async_request(sent)
            content = await response.aread()
            return httpx.Response(response.status_code, headers=response.headers, content=content,
                                  request=request)

        return asyncio.run_coroutine_threadsafe(go(), self._loop).result()


def app_transport(app: Any) -> _Transport:
    """A transport (sync or async) onto any ASGI app, e.g. one built over real engines."""
    return _Transport(app, [], {})


class FakeAPI(RequestLog):
    """The API over fake engines. See the module docstring.

    Args:
        cards: the served models (dialogue models get a FakeNLLEngine, classifiers a FakeDetector).
        scorer: the fake NLL of an item.
        classifier: the fake contradiction probability of an NLI pair (the real detector pairs
            the turns, takes the maximum and picks the evidence).
        limits: the deployment's limits (default: the service's defaults).
        fail_after: answer 503 ``overloaded`` to every scoring request after that many (a server
            going down halfway).
    """

    def __init__(self, cards: Sequence[ModelCard] = FAKE_CARDS, scorer: Scorer = hash_nll,
                 limits: Limits | None = None, fail_after: int | None = None,
                 token: str | None = None, classifier: PairClassifier = negation_probability):
        super().__init__(fail_after)
        self.cards = list(cards)
        nll: dict[str, WatchedNLL] = {}
        classifiers: dict[str, ContradictionServing] = {}
        for card in self.cards:
            if card.family == "classifier":
                classifiers[card.name] = ContradictionServing(FakeDetector(card, classifier),
                                                              max_batch_pairs=4096)
            else:
                serving = NLLServing(FakeNLLEngine(card, scorer), max_batch_tokens=8192)
                nll[card.name] = WatchedNLL(serving, self._hook(card.name))
        reranker = RerankServing(classifiers, nll) if classifiers else None
        self.backend = ModelDirectory(nll, classifiers, reranker, limits=limits or Limits(),
                                      token=token)
        self.app = create_app(self.backend)

    def _hook(self, model: str) -> Callable[[Sequence[NLLItem]], None]:
        def hook(items: Sequence[NLLItem]) -> None:
            if not self.scored(model, [item_json(i) for i in items]):
                raise ServiceError("overloaded", "going down", retry_after=0)
        return hook

    def transport(self) -> _Transport:
        """A transport for a sync or an async client (``transport=`` of either)."""
        return _Transport(self.app, self.paths, self.bodies)

    def client(self, **kw: Any) -> AsyncDialscoreClient:
        """An async client on this fake (keyword arguments as the client's)."""
        return AsyncDialscoreClient("http://fake", transport=self.transport(), **kw)


def error(status: int, type: str, message: str, param: str | None = None,
          headers: dict[str, str] | None = None) -> httpx.Response:
    """An error response in the server's own shape (for MockTransport handlers): its body and,
    as the gateway sends with every error, ``x-error-type``; `status` is checked against the
    server's status table."""
    err = ServiceError(type, message, param)  # type: ignore[arg-type]
    assert err.status == status, f"{type} is {err.status}, not {status}"
    sent = {"x-error-type": type}
    if type == "timeout":  # as contract/http_errors.py: the gateway's 408 dropped the work
        sent["x-work-dropped"] = "true"
    return httpx.Response(status, json=err.body(), headers={**sent, **(headers or {})})
