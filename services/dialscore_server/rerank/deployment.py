"""The rerank deployment, and the typed handle that calls it.

:class:`RerankDeployment` holds no model: it runs a
:class:`~dialscore_server.rerank.serving.RerankServing` over typed handles of the classifier and
NLL deployments (a model with a bulk pool as one
:class:`~dialscore_server.nll.bulk_pool.BulkPooled` over both), each call under the gateway's deadlines (a dead classifier is a prompt 503 or
424, not "the rerank deployment failed"); it resolves its routes to them before it takes requests
(contract/route_warmup.py). :class:`RerankHandle` is
:class:`~dialscore_server.rerank.serving.RerankService` over a Serve handle of it.
"""

from __future__ import annotations

from typing import Any

from ray import serve
from ray.serve.handle import DeploymentHandle

from dialscore_server.contract.deadline import Deadlines
from dialscore_server.contract.reply import Reply
from dialscore_server.contract.route_warmup import resolve_routes
from dialscore_server.contradiction.deployment import ClassifierHandle
from dialscore_server.nll.deployment import nll_services
from dialscore_server.rerank.engine.reranker import RerankOutput
from dialscore_server.rerank.serving import RerankCall, RerankServing


@serve.deployment(name="rerank", max_ongoing_requests=128, ray_actor_options={"num_cpus": 0.1})
class RerankDeployment:
    """Holds no model; composes the classifier and NLL deployments: `rerank`."""

    async def __init__(self, classifiers: dict[str, DeploymentHandle],
                       nll: dict[str, DeploymentHandle], request_timeout_s: float = 60.0,
                       queue_timeout_s: float | None = None,
                       nll_bulk_pools: dict[str, DeploymentHandle] | None = None):
        deadlines = Deadlines(request_timeout_s, queue_timeout_s)
        judges = {name: ClassifierHandle(h, deadlines, name) for name, h in classifiers.items()}
        scorers = nll_services(nll, nll_bulk_pools, deadlines)
        await resolve_routes({**judges, **scorers})
        self.serving = RerankServing(judges, scorers)

    async def rerank(self, call: RerankCall) -> Reply[RerankOutput]:
        return await self.serving.rerank(call)


class RerankHandle:
    """:class:`~dialscore_server.rerank.serving.RerankService` over a Serve handle of the
    :class:`RerankDeployment`, every call under `deadlines`."""

    def __init__(self, handle: Any, deadlines: Deadlines):
        self._handle, self._deadlines = handle, deadlines

    async def rerank(self, call: RerankCall) -> Reply[RerankOutput]:
        return await self._deadlines.call(self._handle.rerank.remote(call), "rerank")
