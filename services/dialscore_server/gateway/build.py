"""The Serve applications: the service (the gateway, one deployment per model and per bulk pool,
the reranker), and its optional bulk ingress (a gateway of its own for bulk work).

Serve YAML: ``import_path: dialscore_server.gateway.build:build_app``; Serve validates the
YAML's ``args`` against :class:`~dialscore_server.gateway.args.AppArgs`. A bulk ingress is a
second application, ``import_path: dialscore_server.gateway.build:build_bulk_ingress``, with
:class:`~dialscore_server.gateway.args.BulkIngressArgs` (the same args, and ``of_app``).
"""

from __future__ import annotations

from typing import Any

from ray import serve

from dialscore_server.checkpoints.registry import ModelConfig
from dialscore_server.contract.options import ServingOptions
from dialscore_server.contradiction.deployment import ContradictionDeployment
from dialscore_server.gateway.args import AppArgs, BulkIngressArgs
from dialscore_server.gateway.bulk_ingress import BulkGateway
from dialscore_server.gateway.deployment import Gateway
from dialscore_server.gateway.deployment_names import (
    classifier_deployment_name, nll_deployment_name, pool_deployment_name,
)
from dialscore_server.nll.affinity import routing_options
from dialscore_server.nll.deployment import NLLDeployment
from dialscore_server.rerank.deployment import RerankDeployment


def build_app(args: AppArgs) -> serve.Application:
    """The Serve application for `args`."""
    nll = {cfg.name: nll_deployment(nll_deployment_name(cfg.name), cfg, opts)
           for cfg, opts in args.model_configs()}
    bulk_pools = {cfg.name: nll_deployment(pool_deployment_name(cfg.name), cfg, opts)
                  for cfg, opts in args.bulk_pools()}
    classifiers = {cfg.name: ContradictionDeployment.options(
        **serve_options(classifier_deployment_name(cfg.name), opts)).bind(cfg.model_dump(), opts.model_dump())
        for cfg, opts in args.classifier_configs()}
    reranker = RerankDeployment.options(
        ray_actor_options={"num_cpus": args.rerank_num_cpus}).bind(
            classifiers, nll, request_timeout_s=args.request_timeout_s,
            queue_timeout_s=args.queue_timeout_s, nll_bulk_pools=bulk_pools) if classifiers else None
    return Gateway.options(**gateway_options(args)).bind(
        nll, args.model_dump(), classifiers, reranker, bulk_pools)


def build_bulk_ingress(args: BulkIngressArgs) -> serve.Application:
    """The bulk ingress of the application `args.of_app` (gateway/bulk_ingress.py): one gateway
    deployment, sized as the main application's gateway, that serves every request in the bulk
    lane on that application's model deployments."""
    return BulkGateway.options(**gateway_options(args)).bind(args.model_dump())


def gateway_options(args: AppArgs) -> dict[str, Any]:
    """Serve deployment options of a gateway deployment (the service's, or a bulk ingress's)."""
    spread = ({"max_replicas_per_node": args.gateway_max_replicas_per_node}
              if args.gateway_max_replicas_per_node else {})
    return dict(
        num_replicas=args.gateway_replicas, ray_actor_options={"num_cpus": args.gateway_num_cpus},
        **spread,
        max_ongoing_requests=args.gateway_max_ongoing_requests,
        max_queued_requests=args.gateway_max_queued_requests,
        backpressure_config={"status_code": 503, "retry_after_s": 1.0},
    )


def nll_deployment(name: str, cfg: ModelConfig, opts: ServingOptions) -> serve.Application:
    """The NLL deployment `name` serving `cfg` with `opts` (a model's own, or its bulk pool)."""
    return NLLDeployment.options(**serve_options(name, opts), **routing_options(opts)).bind(
        cfg.model_dump(), opts.model_dump())


def serve_options(name: str, opts: ServingOptions) -> dict[str, Any]:
    """Serve deployment options of one model deployment (`name` is the deployment's name)."""
    options: dict[str, Any] = dict(
        name=name, max_ongoing_requests=opts.max_ongoing_requests,
        max_queued_requests=opts.max_queued_requests,
        health_check_period_s=opts.health_check_period_s,
        ray_actor_options={"num_cpus": opts.num_cpus, "num_gpus": opts.num_gpus},
    )
    if opts.autoscaling_config:
        options["autoscaling_config"] = opts.autoscaling_config
    else:
        options["num_replicas"] = opts.num_replicas
    return options
