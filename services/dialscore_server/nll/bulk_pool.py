"""A dialogue model with a bulk pool, as the routers and the rerank serving call it.

A model entry's ``bulk_pool`` (gateway/args.py) serves the same checkpoint as a deployment of
its own, ``bulk-nll-<name>``, for the requests that ask for the bulk lane. :class:`BulkPooled`
is the one :class:`~dialscore_server.nll.serving.NLLService` the gateway and the rerank
deployment hold for such a model: it sends each call to the model's own replicas or to its
pool by the lane the call asks for, so no router knows that pools exist.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence

from dialscore.model_card import ModelCard
from dialscore_server.contract.priority import Lane
from dialscore_server.contract.reply import Reply
from dialscore_server.nll.completions.serving import CompletionCall, Completed
from dialscore_server.nll.engine.encoding import NLLItem
from dialscore_server.nll.serving import NLLService, Scored
from dialscore_server.nll.tokenizer.serving import TokenizerCall


class BulkPooled:
    """:class:`~dialscore_server.nll.serving.NLLService` over a model's own replicas (`own`)
    and its bulk pool (`pool`). `score` and `complete` asking for the ``bulk`` lane go to the
    pool, with the lane they ask for; every other call goes to the model's own replicas, where
    a request over ``interactive_max_cost`` is still served in their bulk lane. `card` asks
    both (so that resolving routes at start and the readiness probe reach the pool too) and
    returns the model's own card."""

    def __init__(self, own: NLLService, pool: NLLService):
        self.own, self.pool = own, pool

    def _for(self, lane: Lane) -> NLLService:
        return self.pool if lane == "bulk" else self.own

    async def score(self, items: Sequence[NLLItem], return_tokens: bool = False,
                    lane: Lane = "interactive") -> Reply[Scored]:
        return await self._for(lane).score(items, return_tokens, lane)

    async def complete(self, call: CompletionCall, lane: Lane = "interactive"
                       ) -> Reply[Completed]:
        return await self._for(lane).complete(call, lane)

    async def card(self) -> ModelCard:
        card, _ = await asyncio.gather(self.own.card(), self.pool.card())
        return card

    async def tokenizer(self, call: TokenizerCall) -> Reply[object]:
        return await self.own.tokenizer(call)


def with_bulk_pools(models: Mapping[str, NLLService], pools: Mapping[str, NLLService]
                    ) -> dict[str, NLLService]:
    """`models` by name, each one that has a pool in `pools` (by the same name) as
    :class:`BulkPooled`. A pool of a model not in `models` is a ValueError."""
    stray = sorted(set(pools) - set(models))
    if stray:
        raise ValueError(f"bulk pools of models not served: {stray}")
    return {name: BulkPooled(service, pools[name]) if name in pools else service
            for name, service in models.items()}
