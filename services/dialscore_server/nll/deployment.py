"""The Ray Serve deployment around :class:`~dialscore_server.nll.engine.NLLEngine` (a thin shim).

Requests are validated and tokenized *before* they enter the batch queue (one bad item fails only
its own request, never a batch of good ones). `@serve.batch` then merges requests from many callers
into one engine call, sized by tokens (`batch_size_fn`), and the engine splits that into
token-budget forward passes. Errors come back as data (:class:`ScoreReply.error`), so their type
and field survive the trip between processes.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

from ray import serve

from dialscore_server.nll.engine import BatchStats, NLLEngine, NLLItem, NLLResult, ScoringInputError
from dialscore_server.checkpoints.registry import ModelConfig


@dataclass
class ScoreCall:
    """One HTTP request's worth of work, already encoded (what enters the batch queue)."""

    encoded: list
    tokens: int  # the request's tokens, capped at the replica's max_batch_tokens


@dataclass
class ScoreReply:
    """What a replica returns for one request: results in item order, or an error."""

    results: list[NLLResult] = field(default_factory=list)
    tokens: list[list[str]] | None = None
    error: dict | None = None  # {"type", "message", "param"}
    batch: BatchStats | None = None  # set on the first request of each engine call only
    batch_requests: int = 0
    queue_s: float = 0.0
    compute_s: float = 0.0


#: Upper bound of `max_batch_tokens` (Serve's max_batch_size, counted in tokens).
MAX_BATCH_TOKENS = 16384


def _batch_tokens(calls: list[ScoreCall]) -> int:
    return sum(c.tokens for c in calls)


@serve.deployment(name="nll", max_ongoing_requests=64, ray_actor_options={"num_cpus": 0.5})
class NLLDeployment:
    """Hosts one dialogue model. Methods: `score`, `info`, `check_health`."""

    def __init__(self, config: dict[str, Any], token_budget: int | None = None,
                 max_batch_tokens: int = 8192,
                 batch_wait_timeout_s: float = 0.005, num_threads: int | None = None,
                 prefix_reuse: bool = True, fast_kernels: bool = True):
        self.config = ModelConfig.model_validate(config)
        self.engine = NLLEngine(self.config, token_budget=token_budget, num_threads=num_threads,
                                prefix_reuse=prefix_reuse, fast_kernels=fast_kernels)
        self.max_batch_tokens = min(max_batch_tokens, MAX_BATCH_TOKENS)
        self._batched.set_max_batch_size(self.max_batch_tokens)
        self._batched.set_batch_wait_timeout_s(batch_wait_timeout_s)

    def info(self) -> dict[str, Any]:
        """The model card for GET /v1/models."""
        c, loaded = self.config, self.engine.loaded
        return {
            "name": c.name, "family": c.family, "source": c.source,
            "revision": loaded.resolved_revision, "max_length": c.max_length, "dtype": c.dtype,
            "device": loaded.device, "stand_in": loaded.stand_in, "format": c.format.model_dump(),
        }

    def check_health(self) -> None:
        """Serve's periodic health check: a real one-token forward pass."""
        self.engine.score_encoded([self.engine.encode(NLLItem(target="ok", source=""))])

    async def score(self, items: list[NLLItem], return_tokens: bool = False) -> ScoreReply:
        """Validate and tokenize, then join the batch queue. Errors name the item's field."""
        try:
            encoded = await asyncio.to_thread(self._encode_all, items)
        except ScoringInputError as exc:
            return ScoreReply(error={"type": "invalid_request", "message": str(exc), "param": exc.param})
        enqueued = time.perf_counter()
        # Serve refuses a request larger than max_batch_size; requests are never split, so a
        # large one counts as a full batch and runs alone.
        size = min(sum(e.cost for e in encoded), self.max_batch_tokens)
        reply: ScoreReply = await self._batched(ScoreCall(encoded, size))
        reply.queue_s = max(0.0, time.perf_counter() - enqueued - reply.compute_s)
        if return_tokens:
            reply.tokens = [self.engine.token_strings(r.token_ids) for r in reply.results]
        return reply

    def _encode_all(self, items: list[NLLItem]) -> list:
        out = []
        for i, item in enumerate(items):
            try:
                out.append(self.engine.encode(item))
            except ScoringInputError as exc:
                raise ScoringInputError(str(exc), f"items[{i}].{exc.param}") from None
        return out

    @serve.batch(max_batch_size=8192, batch_wait_timeout_s=0.005, batch_size_fn=_batch_tokens)
    async def _batched(self, calls: list[ScoreCall]) -> list[ScoreReply]:
        flat = [e for c in calls for e in c.encoded]
        start = time.perf_counter()
        # The forward pass runs off the event loop, so the replica keeps accepting and
        # tokenizing requests (and answering health checks) while it computes.
        results, stats = await asyncio.to_thread(self.engine.score_encoded, flat)
        compute = time.perf_counter() - start
        replies, pos = [], 0
        for k, c in enumerate(calls):
            n = len(c.encoded)
            replies.append(ScoreReply(results=results[pos:pos + n], batch=stats if k == 0 else None,
                                      batch_requests=len(calls), compute_s=compute))
            pos += n
        return replies
