"""Resolving a composing deployment's routes to its model deployments at start, while the head's
GCS is there to resolve them.

A Serve handle resolves its route on its first call: it finds Serve's controller and each
running replica of the deployment it calls, and their addresses, through the GCS. After that,
calls go from worker to worker, and a route resolved once keeps working while the GCS is down
(docs/operating/failures.md, "Losing the head's GCS"); a route first used during such an outage waits
for the GCS instead. So the gateway and the rerank deployment call every model they route to
once, each model's `card`, before they take requests: :func:`resolve_routes`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Protocol

from dialscore.model_card import ModelCard

logger = logging.getLogger("dialscore.serve")

#: How long a deployment's start waits for its models' first answers (models still loading,
#: or queued behind a scale-up) before it starts all the same, its unresolved routes then
#: resolving on their first request.
ROUTE_WARMUP_S = 600.0
#: Seconds between tries of a model that has not answered yet.
RETRY_S = 1.0


class HasCard(Protocol):
    async def card(self) -> ModelCard: ...


async def resolve_routes(services: Mapping[str, HasCard], give_up_s: float = ROUTE_WARMUP_S,
                         retry_s: float = RETRY_S) -> dict[str, ModelCard]:
    """Call every service's `card` until it answers, each tried again every `retry_s` until
    `give_up_s` have passed since the start; returns the cards that answered, by name. A model
    that has not answered by then is logged, not raised: its route resolves on its first
    request."""
    loop = asyncio.get_running_loop()
    give_up_at = loop.time() + give_up_s

    async def resolve(name: str, service: HasCard) -> tuple[str, ModelCard | None]:
        while True:
            try:
                return name, await service.card()
            except Exception as exc:  # noqa: BLE001 (any failure: the model is not up yet)
                left = give_up_at - loop.time()
                if left <= 0:
                    logger.warning("route to %s not resolved at start (%s); it resolves on its "
                                   "first request", name, exc)
                    return name, None
                await asyncio.sleep(min(retry_s, left))

    answered = await asyncio.gather(*(resolve(n, s) for n, s in services.items()))
    return {name: card for name, card in answered if card is not None}
