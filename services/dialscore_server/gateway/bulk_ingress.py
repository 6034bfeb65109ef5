"""The bulk ingress: a gateway of its own for bulk work, in a second Serve application.

Bulk requests (a probe run, an evaluation) sent through the service's one gateway share its
process with interactive ones: reading, validating and answering a 64-item request takes the
gateway's event loop and a share of the node's CPU while an interactive rerank waits behind it.
A bulk ingress takes that work elsewhere. It is a second application (``build_bulk_ingress``,
under a route prefix of its own, such as ``/bulk``) whose one deployment, :class:`BulkGateway`:

- serves the same API on the model deployments of the main application (``of_app``), looked up
  by name: a model's bulk pool where it has one, its replicas' bulk lane where not;
- serves every request in the bulk lane, whatever it asks (:class:`AllBulk` sets the priority
  header before the app reads it): a caller gets no interactive lane through it;
- runs at ``ingress_priority`` (default ``low``), every thread of its process, so that on a
  shared node the interactive gateway and replicas get the CPU first.

Serve's proxy is still one per node and shared: a bulk request's bytes pass through it.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from fastapi import FastAPI
from ray import serve
from ray.serve.handle import DeploymentHandle

from dialscore_server.contract.priority import PRIORITY_HEADER
from dialscore_server.gateway.args import BulkIngressArgs
from dialscore_server.gateway.deployment import GatewayReplica
from dialscore_server.gateway.deployment_names import (
    classifier_deployment_name, nll_deployment_name, pool_deployment_name,
)
from dialscore_server.rerank.deployment import RerankDeployment
from dialscore_server.scheduling.cpu_priority import lower_process_priority

logger = logging.getLogger("dialscore.gateway")

#: Seconds between looks for a deployment of the main application that does not exist yet.
LOOKUP_RETRY_S = 1.0

_HEADER = PRIORITY_HEADER.lower().encode("latin-1")


class AllBulk:
    """ASGI middleware around `app`: every HTTP request reaches `app` with the header
    ``X-Dialscore-Priority: bulk``, whatever priority header it came with (that one is
    dropped). The body's ``priority`` can still ask for bulk, never for interactive: the
    header's bulk wins (contract/priority.py)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            headers = [(k, v) for k, v in scope["headers"] if k.lower() != _HEADER]
            scope = {**scope, "headers": [*headers, (_HEADER, b"bulk")]}
        await self.app(scope, receive, send)


async def lookup(name: str, app_name: str, wait_s: float,
                 retry_s: float = LOOKUP_RETRY_S) -> DeploymentHandle:
    """A handle to deployment `name` of application `app_name`, waiting up to `wait_s` for it to
    exist; then a RuntimeError naming both."""
    loop = asyncio.get_running_loop()
    give_up_at = loop.time() + wait_s
    while True:
        try:
            return await asyncio.to_thread(serve.get_deployment_handle, name, app_name)
        except Exception as exc:  # noqa: BLE001 - any failure: the application is not up yet
            if loop.time() >= give_up_at:
                raise RuntimeError(f"bulk ingress: no deployment {name!r} in application "
                                   f"{app_name!r} after {wait_s:g} s (of_app): {exc}") from exc
            await asyncio.sleep(retry_s)


async def handles_of(args: BulkIngressArgs) -> dict[str, Any]:
    """The main application's handles as :class:`GatewayReplica.open` takes them: every dialogue
    model's deployment and pool, every classifier's, and the reranker where classifiers are
    served, by the names build_app gives them (gateway/deployment_names.py)."""
    async def find(name: str) -> DeploymentHandle:
        return await lookup(name, args.of_app, args.of_app_wait_s)

    nll = {m.served_name: await find(nll_deployment_name(m.served_name)) for m in args.models}
    pools = {m.served_name: await find(pool_deployment_name(m.served_name))
             for m in args.models if m.bulk_pool is not None}
    classifiers = {c.served_name: await find(classifier_deployment_name(c.served_name))
                   for c in args.classifiers}
    reranker = await find(RerankDeployment.name) if args.classifiers else None
    return {"nll": nll, "classifiers": classifiers, "reranker": reranker,
            "nll_bulk_pools": pools}


@serve.deployment(name="bulk-gateway", max_ongoing_requests=256)
@serve.ingress()
class BulkGateway(GatewayReplica):
    """A gateway that serves every request in the bulk lane, on another application's model
    deployments, at a lowered CPU priority."""

    async def __init__(self, args: dict[str, Any]):
        ingress_args = BulkIngressArgs.model_validate(args)
        lowered = lower_process_priority(ingress_args.ingress_priority, "ingress_priority")
        logger.info("bulk ingress of %r: %d threads at %s priority", ingress_args.of_app,
                    lowered, ingress_args.ingress_priority)
        await self.open(ingress_args, **await handles_of(ingress_args))

    def __serve_build_asgi_app__(self) -> FastAPI:
        app = super().__serve_build_asgi_app__()
        app.add_middleware(AllBulk)  # outermost: before the app reads any header
        return app
