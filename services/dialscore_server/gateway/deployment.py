"""The gateway as a Ray Serve ingress: a :class:`~dialscore_server.directory.ModelDirectory`
over typed handles of the model deployments (a model with a bulk pool as one
:class:`~dialscore_server.nll.bulk_pool.BulkPooled` over both), serving the FastAPI app
(gateway/app.py). :class:`GatewayReplica` is what every gateway replica is; :class:`Gateway` is
the service's, which is given its handles; the bulk ingress's (gateway/bulk_ingress.py) looks
them up in the service's application.

The app is built per replica, after the constructor (``__serve_build_asgi_app__``), so routes
close over the live gateway (its handles, limits and token) rather than over a copy Serve froze at
import time. Before it takes requests, a replica resolves its route to every model
(contract/route_warmup.py), so that it can route to each while the head's GCS is down.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from ray import serve
from ray.serve.handle import DeploymentHandle

from dialscore_server.contract.deadline import Deadlines, timer_at
from dialscore_server.contradiction.deployment import ClassifierHandle
from dialscore_server.gateway.app import create_app
from dialscore_server.gateway.args import AppArgs
from dialscore_server.gateway.auth import gateway_token
from dialscore_server.directory import ModelDirectory
from dialscore_server.contract.host_check import AllowedHosts
from dialscore_server.nll.deployment import nll_services
from dialscore_server.rerank.deployment import RerankHandle


class GatewayReplica(ModelDirectory):
    """What every gateway replica is, over handles it is given (:class:`Gateway`) or looks up
    (the bulk ingress, gateway/bulk_ingress.py): a model directory serving the FastAPI app."""

    async def open(self, app_args: AppArgs, nll: dict[str, DeploymentHandle],
                   classifiers: dict[str, DeploymentHandle] | None = None,
                   reranker: DeploymentHandle | None = None,
                   nll_bulk_pools: dict[str, DeploymentHandle] | None = None) -> None:
        """Fill the directory from the handles, under `app_args`' deadlines, limits and auth,
        and resolve the route to every model before taking requests."""
        deadlines = Deadlines(app_args.request_timeout_s, app_args.queue_timeout_s,
                              count_in_flight=True, timer=timer_at(app_args.deadline_timer))
        ModelDirectory.__init__(
            self, nll_services(nll, nll_bulk_pools, deadlines),
            {name: ClassifierHandle(h, deadlines, name) for name, h in (classifiers or {}).items()},
            RerankHandle(reranker, deadlines) if reranker is not None else None,
            limits=app_args.limits, body_timeout_s=app_args.body_timeout_s,
            token=gateway_token(app_args.auth_token_env, app_args.auth_required),
            allowed_hosts=(AllowedHosts.of(app_args.allowed_hosts)
                           if app_args.allowed_hosts is not None else None))
        await self.resolve_routes()

    def __serve_build_asgi_app__(self) -> FastAPI:
        return create_app(self)


@serve.deployment(name="gateway", max_ongoing_requests=256)
@serve.ingress()
class Gateway(GatewayReplica):
    """Routes HTTP requests to the model deployments of its application; holds no model itself."""

    async def __init__(self, nll: dict[str, DeploymentHandle], args: dict[str, Any],
                       classifiers: dict[str, DeploymentHandle] | None = None,
                       reranker: DeploymentHandle | None = None,
                       nll_bulk_pools: dict[str, DeploymentHandle] | None = None):
        await self.open(AppArgs.model_validate(args), nll, classifiers, reranker,
                        nll_bulk_pools)
