"""The gateway's backend over deployment handles, and the gateway as a Ray Serve ingress.

:class:`HandleBackend` routes requests to the model deployments through handle-like objects
(``handle.method.remote(*args)`` returning an awaitable): Serve's DeploymentHandles in a replica,
in-process stand-ins in tests. :class:`Gateway` is the Serve deployment around it. Its FastAPI app
(gateway/app.py) is built per replica, after the constructor (``__serve_build_asgi_app__``), so
routes close over the live gateway (its handles, limits and token) rather than over a copy Serve
froze at import time.
"""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import FastAPI
from ray import serve
from ray.serve.handle import DeploymentHandle

from dialscore.model_card import ModelCard
from dialscore_server import metrics
from dialscore_server.contract.backend import Pool
from dialscore_server.contract.deadline import answer, from_ray
from dialscore_server.contract.errors import ServiceError
from dialscore_server.contract.limits import Limits
from dialscore_server.gateway.app import create_app
from dialscore_server.gateway.args import AppArgs
from dialscore_server.gateway.auth import gateway_token


class HandleBackend:
    """The models behind one gateway, reached through their deployments' handles."""

    def __init__(self, nll: dict[str, Any], classifiers: dict[str, Any] | None = None,
                 reranker: Any | None = None, *, limits: Limits, request_timeout_s: float,
                 queue_timeout_s: float | None, token: str | None, body_timeout_s: float = 10.0):
        self.nll = nll
        self.classifiers = classifiers or {}
        self.models = {**nll, **self.classifiers}  # every servable model by name
        self.model_names = list(self.models)
        self.has_classifiers = bool(self.classifiers)
        self.reranker = reranker
        self.limits = limits
        self.timeout = request_timeout_s
        self.queue_timeout = queue_timeout_s
        self.body_timeout = body_timeout_s
        self.token = token
        self._cards: dict[str, ModelCard] = {}

    def resolve(self, model: str | None, pool: Pool, param: str) -> str:
        """The served model for a request's `model` field: `pool` "nll" (causal/seq2seq) or
        "classifier"; None picks the default classifier. Unknown → 404 naming `param`."""
        names = self.nll if pool == "nll" else self.classifiers
        if model is None and pool == "classifier" and names:
            return next(iter(names))
        if model not in names:
            kind = "dialogue (NLL) model" if pool == "nll" else "classifier"
            raise ServiceError("unknown_model", f"unknown {kind} {model!r}; served: "
                               f"{', '.join(sorted(names)) or 'none'}", param=param)
        return model

    async def call(self, model: str, method: str, *args: Any) -> Any:
        """Call a model deployment's method under the request deadline; Ray errors → ServiceError."""
        handle = self.models.get(model)
        if handle is None:
            raise ServiceError("unknown_model", f"unknown model {model!r}; served: "
                               f"{', '.join(sorted(self.models))}", param="model")
        return await self._guarded(model, getattr(handle, method).remote(*args))

    async def call_rerank(self, *args: Any) -> Any:
        return await self._guarded("rerank", self.reranker.rerank.remote(*args))

    async def _guarded(self, label: str, pending):
        metrics.IN_FLIGHT.labels(label).inc()
        try:
            return await answer(pending, self.timeout, self.queue_timeout)
        except ServiceError:
            raise
        except Exception as exc:  # noqa: BLE001 - every Ray failure maps to a typed error
            raise from_ray(exc) from None
        finally:
            metrics.IN_FLIGHT.labels(label).dec()

    async def card(self, model: str) -> ModelCard:
        """The model's card (cached after the first answer)."""
        if model not in self._cards:
            self._cards[model] = await self.call(model, "card")
        return self._cards[model]

    async def readiness(self) -> dict[str, str]:
        async def probe(model: str) -> str:
            try:
                await answer(self.models[model].card.remote(), 5.0, None)
                return "ok"
            except Exception as exc:  # noqa: BLE001 - reported, not raised
                return f"unavailable: {type(exc).__name__}"

        return dict(zip(self.model_names, await asyncio.gather(*map(probe, self.model_names))))


@serve.deployment(name="gateway", max_ongoing_requests=256)
@serve.ingress()
class Gateway(HandleBackend):
    """Routes HTTP requests to the model deployments; holds no model itself."""

    def __init__(self, nll: dict[str, DeploymentHandle], args: dict[str, Any],
                 classifiers: dict[str, DeploymentHandle] | None = None,
                 reranker: DeploymentHandle | None = None):
        app_args = AppArgs.model_validate(args)
        super().__init__(nll, classifiers, reranker, limits=app_args.limits,
                         request_timeout_s=app_args.request_timeout_s,
                         queue_timeout_s=app_args.queue_timeout_s,
                         body_timeout_s=app_args.body_timeout_s,
                         token=gateway_token(app_args.auth_token_env, app_args.auth_required))

    def __serve_build_asgi_app__(self) -> FastAPI:
        return create_app(self)
