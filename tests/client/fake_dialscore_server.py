"""A fake dialscore service for client and probe tests: an ``httpx.MockTransport`` handler that
speaks the v1 API (models, nll, contradiction, rerank, health) with deterministic fake NLLs.

It counts what it receives, so a test can assert e.g. that a resumed probe run sends no
scoring request. Not a model: the default NLL is a hash of the item, in [1, 5).
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Callable
from typing import Any

import httpx

FAKE_MODELS: list[dict[str, Any]] = [
    {"name": "fake-gpt", "family": "causal", "source": "fake/gpt", "revision": "0123abcd",
     "max_length": 1024, "dtype": "float32", "device": "cpu", "stand_in": True,
     "format": {"turn_separator": "{eos}", "separator_after_last": True,
                "knowledge_position": "before_history", "knowledge_separator": "{eos}",
                "why_turn": "Why is that?", "append_eos": True, "target_bos": False}},
    # No "format": the client must fall back to the defaults (why turn "Why?").
    {"name": "fake-bart", "family": "seq2seq", "source": "fake/bart", "revision": None,
     "max_length": 256, "dtype": "float32", "device": "cpu", "stand_in": False,
     "some_future_field": {"ignored": True}},
    {"name": "fake-nli", "family": "classifier", "source": "fake/nli", "revision": "main",
     "max_length": 512, "dtype": "float32", "device": "cpu", "stand_in": True},
]

Scorer = Callable[[str, dict[str, Any]], float]


def hash_nll(model: str, item: dict[str, Any]) -> float:
    """A deterministic fake NLL in [1, 5) from the model and the item."""
    blob = json.dumps([model, item], sort_keys=True, ensure_ascii=False).encode()
    return 1.0 + 4.0 * int.from_bytes(hashlib.sha256(blob).digest()[:4], "big") / 2**32


def error(status: int, type: str, message: str, param: str | None = None,
          headers: dict[str, str] | None = None) -> httpx.Response:
    return httpx.Response(status, json={"error": {"type": type, "message": message, "param": param}},
                          headers=headers)


class FakeServer:
    """``FakeServer().transport()`` for a sync or async client; ``scorer(model, item)`` gives NLLs.

    ``fail_after``: answer 503 to every scoring request after that many (a server dying halfway).
    """

    def __init__(self, scorer: Scorer = hash_nll, models: list[dict[str, Any]] | None = None,
                 max_items: int = 1024, fail_after: int | None = None):
        self.scorer = scorer
        self.models = FAKE_MODELS if models is None else models
        self.max_items = max_items
        self.fail_after = fail_after
        self.lock = threading.Lock()
        self.paths: list[str] = []
        self.nll_requests = 0
        self.nll_items: list[tuple[str, dict[str, Any]]] = []
        self.max_request_items = 0

    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self.handle)

    def handle(self, request: httpx.Request) -> httpx.Response:
        with self.lock:
            self.paths.append(request.url.path)
        path = request.url.path
        if path == "/healthz":
            return httpx.Response(200, json={"status": "ok"})
        if path == "/readyz":
            return httpx.Response(200, json={"status": "ready"})
        if path == "/v1/models" and request.method == "GET":
            return httpx.Response(200, json={"models": self.models})
        if path == "/v1/nll" and request.method == "POST":
            return self._nll(json.loads(request.content))
        return error(404, "not_found", f"no route {path}")

    def _nll(self, body: dict[str, Any]) -> httpx.Response:
        model = body.get("model")
        known = {m["name"]: m for m in self.models}
        if model not in known or known[model]["family"] == "classifier":
            return error(404, "unknown_model", f"unknown model {model!r}", "model")
        items = body.get("items") or []
        if len(items) > self.max_items:
            return error(413, "payload_too_large", f"at most {self.max_items} items", "items")
        for i, item in enumerate(items):
            if not isinstance(item.get("target"), str) or not item["target"]:
                return error(422, "invalid_request", "target must be a non-empty string",
                             f"items[{i}].target")
        with self.lock:
            if self.fail_after is not None and self.nll_requests >= self.fail_after:
                return error(503, "overloaded", "going down", headers={"Retry-After": "0"})
            self.nll_requests += 1
            self.nll_items.extend((model, item) for item in items)
            self.max_request_items = max(self.max_request_items, len(items))
        results = [{"nll": self.scorer(model, item), "num_tokens": len(item["target"].split()) + 1,
                    "truncated": False} for item in items]
        m = known[model]
        return httpx.Response(200, json={
            "model": model, "source": m["source"], "revision": m["revision"],
            "stand_in": m["stand_in"], "append_eos": True, "results": results,
            "usage": {"source_tokens": 10 * len(items), "target_tokens": 5 * len(items)}})
