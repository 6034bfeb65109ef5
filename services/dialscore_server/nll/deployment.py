"""The Ray Serve deployment of an NLL engine, and the typed handle that calls it.

:class:`NLLDeployment` hosts one dialogue model: an :class:`~dialscore_server.nll.serving.NLLServing`
whose chunks meet the engine through the replica's lane queue
(:func:`~dialscore_server.scheduling.serving.merged`), merging requests from many callers into one
engine call sized by the positions the engine computes. It builds its engine with the class's
``from_options`` (``serving.engine``, default
:class:`~dialscore_server.nll.engine.engine.NLLEngine`), so a test can serve a fake engine that
loads no model. Requests are validated and tokenized before
their chunks are queued (one bad item fails only its own request).

:class:`NLLHandle` is :class:`~dialscore_server.nll.serving.NLLService` over a Serve handle of
that deployment: what the gateway and the rerank deployment call (:func:`nll_services`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ray import serve

from dialscore.model_card import ModelCard
from dialscore_server.checkpoints.registry import ModelConfig
from dialscore_server.contract.deadline import Deadlines
from dialscore_server.contract.deployment import ModelDeployment
from dialscore_server.contract.options import ServingOptions
from dialscore_server.contract.reply import Reply
from dialscore_server.nll.bulk_pool import with_bulk_pools
from dialscore_server.nll.completions.serving import CompletionCall, Completed
from dialscore_server.nll.engine.encoding import NLLItem
from dialscore_server.nll.engine.engine import NLLEngine
from dialscore_server.nll.serving import NLLService, NLLServing, Scored
from dialscore_server.nll.tokenizer.serving import TokenizerCall
from dialscore_server.scheduling.device_gate import device_gate
from dialscore_server.contract.priority import Lane


@serve.deployment(name="nll", max_ongoing_requests=64, ray_actor_options={"num_cpus": 0.5})
class NLLDeployment(ModelDeployment):
    """Hosts one dialogue model: `score`, `complete`, `tokenizer`, `card`, `check_health`."""

    default_engine = NLLEngine

    def __init__(self, config: ModelConfig | dict[str, Any],
                 options: ServingOptions | dict[str, Any] | None = None):
        super().__init__(config, options)
        self.serving = NLLServing.from_options(self.engine, self.options, self.config.name,
                                               gate=device_gate(self.engine.card().device))

    async def score(self, items: Sequence[NLLItem], return_tokens: bool = False,
                    lane: Lane = "interactive") -> Reply[Scored]:
        return await self.serving.score(items, return_tokens, lane)

    async def complete(self, call: CompletionCall, lane: Lane = "interactive"
                       ) -> Reply[Completed]:
        return await self.serving.complete(call, lane)

    async def tokenizer(self, call: TokenizerCall) -> Reply[object]:
        return await self.serving.tokenizer(call)


class NLLHandle:
    """:class:`~dialscore_server.nll.serving.NLLService` over a Serve handle of an
    :class:`NLLDeployment`, every call under `deadlines` (labelled `model`)."""

    def __init__(self, handle: Any, deadlines: Deadlines, model: str):
        self._handle, self._deadlines, self._model = handle, deadlines, model

    async def score(self, items: Sequence[NLLItem], return_tokens: bool = False,
                    lane: Lane = "interactive") -> Reply[Scored]:
        return await self._deadlines.call(
            self._handle.score.remote(list(items), return_tokens, lane), self._model)

    async def complete(self, call: CompletionCall, lane: Lane = "interactive"
                       ) -> Reply[Completed]:
        return await self._deadlines.call(self._handle.complete.remote(call, lane), self._model)

    async def card(self) -> ModelCard:
        return await self._deadlines.call(self._handle.card.remote(), self._model)

    async def tokenizer(self, call: TokenizerCall) -> Reply[object]:
        return await self._deadlines.call(self._handle.tokenizer.remote(call), self._model)


def nll_services(nll: Mapping[str, Any], bulk_pools: Mapping[str, Any] | None,
                 deadlines: Deadlines) -> dict[str, NLLService]:
    """The dialogue models a composing deployment (the gateway, the rerank deployment) calls,
    by name, from Serve handles of their deployments and of their bulk pools: an
    :class:`NLLHandle` each, a model with a pool as one
    :class:`~dialscore_server.nll.bulk_pool.BulkPooled` over both."""
    def handles(by_name: Mapping[str, Any]) -> dict[str, NLLService]:
        return {name: NLLHandle(h, deadlines, name) for name, h in by_name.items()}

    return with_bulk_pools(handles(nll), handles(bulk_pools or {}))
