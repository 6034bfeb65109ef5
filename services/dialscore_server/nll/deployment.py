"""The Ray Serve deployment of an NLL engine: :class:`~dialscore_server.nll.serving.NLLServing`
with ``@serve.batch`` merging requests from many callers into one engine call, sized by the
positions the engine computes (``Work.positions``).

It receives the engine class (default :class:`~dialscore_server.nll.engine.engine.NLLEngine`) and builds
it with ``from_options``, so a test can serve a fake engine that loads no model. Requests are
validated and tokenized *before* they enter the batch queue (one bad item fails only its own
request, never a batch of good ones); the engine splits a merged call into token-budget forward
passes.
"""

from __future__ import annotations

from typing import Any

from ray import serve

from dialscore.model_card import ModelCard
from dialscore_server.checkpoints.registry import ModelConfig
from dialscore_server.contract.options import ServingOptions
from dialscore_server.contract.reply import Reply
from dialscore_server.nll.completions.choices import Completed
from dialscore_server.nll.engine.encoding import NLLItem
from dialscore_server.nll.engine.engine import NLLEngine
from dialscore_server.nll.serving import NLLScorer, NLLServing, Scored, Work

#: Upper bound of `max_batch_tokens` (Serve's max_batch_size, counted in computed positions).
MAX_BATCH_TOKENS = 16384


def _batch_positions(works: list[Work]) -> int:
    return sum(w.positions for w in works)


@serve.deployment(name="nll", max_ongoing_requests=64, ray_actor_options={"num_cpus": 0.5})
class NLLDeployment:
    """Hosts one dialogue model. Methods: `score`, `complete`, `card`, `check_health`."""

    def __init__(self, config: ModelConfig | dict[str, Any],
                 options: ServingOptions | dict[str, Any] | None = None,
                 engine_cls: type[NLLScorer] = NLLEngine):
        config = ModelConfig.model_validate(config)
        options = ServingOptions.model_validate(options or {})
        max_batch_tokens = min(options.max_batch_tokens, MAX_BATCH_TOKENS)
        self.serving = NLLServing(engine_cls.from_options(config, options), max_batch_tokens,
                                  chunk_tokens=options.chunk_tokens, model=config.name)
        self._batched.set_max_batch_size(max_batch_tokens)
        self._batched.set_batch_wait_timeout_s(options.batch_wait_timeout_s)

    def card(self) -> ModelCard:
        """The model card for GET /v1/models and every response's provenance."""
        return self.serving.card()

    def check_health(self) -> None:
        """Serve's periodic health check: the engine's real, tiny forward pass."""
        self.serving.check_health()

    def work_stats(self) -> dict[str, float | str]:
        """This replica's work accounting (fair_chunks.WorkStats), for tests and benchmarks."""
        return self.serving.ledger.stats.snapshot()

    async def score(self, items: list[NLLItem], return_tokens: bool = False) -> Reply[Scored]:
        return await self.serving.score(items, return_tokens, runner=self._batched)

    async def complete(self, prompts: list[str | list[int]], params: list[str], echo: bool,
                       generate: bool, logprobs: int | None) -> Reply[Completed]:
        """POST /v1/completions' prompts, merged into the same engine calls as `score`'s items."""
        return await self.serving.complete(prompts, params, echo=echo, generate=generate,
                                           logprobs=logprobs, runner=self._batched)

    @serve.batch(max_batch_size=8192, batch_wait_timeout_s=0.005, batch_size_fn=_batch_positions)
    async def _batched(self, works: list[Work]) -> list[Reply[Scored]]:
        # The forward pass runs off the event loop, so the replica keeps accepting and
        # tokenizing requests (and answering health checks) while it computes.
        return await self.serving.engine_thread.call(works)
