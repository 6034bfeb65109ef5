"""The names of an application's model deployments, by the served model's name: how
:func:`~dialscore_server.gateway.build.build_app` names them, and how a bulk ingress
(gateway/bulk_ingress.py) finds them in that application. The rerank deployment is
``RerankDeployment.name``."""

from __future__ import annotations


def nll_deployment_name(model: str) -> str:
    """A dialogue model's own deployment."""
    return f"nll-{model}"


def pool_deployment_name(model: str) -> str:
    """A dialogue model's bulk pool (``bulk_pool``)."""
    return f"bulk-nll-{model}"


def classifier_deployment_name(model: str) -> str:
    """A classifier's deployment."""
    return f"nli-{model}"
