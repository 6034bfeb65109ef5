"""The models behind one ingress (the gateway, or a batch job's worker), as the routers see them: every served model by name, each a
typed service (:class:`~dialscore_server.nll.serving.NLLService`,
:class:`~dialscore_server.contradiction.serving.ClassifierService`,
:class:`~dialscore_server.rerank.serving.RerankService`).

:class:`ModelDirectory` is the one implementation of every router's backend protocol. The Serve
gateway (gateway/deployment.py) fills it with typed Serve handles; a batch worker
(batch/models.py) and tests fill it with in-process servings.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

from dialscore.model_card import ModelCard
from dialscore_server.contract.backend import Pool
from dialscore_server.contract.errors import InputError, ServiceError
from dialscore_server.contract.host_check import AllowedHosts
from dialscore_server.contract.limits import Limits
from dialscore_server.contract.route_warmup import resolve_routes
from dialscore_server.contradiction.serving import ClassifierService
from dialscore_server.nll.serving import NLLService
from dialscore_server.rerank.serving import RerankService

#: Seconds a model's card may take to answer a readiness probe.
READINESS_TIMEOUT_S = 5.0


class ModelDirectory:
    """Every served model by name, the reranker, and the ingress settings the app reads: the
    request `limits`, the bearer `token` (None: auth off), `body_timeout_s` (None: none) and
    `allowed_hosts`, the Host check while auth is off (None: no check; contract/host_check.py)."""

    def __init__(self, nll: Mapping[str, NLLService],
                 classifiers: Mapping[str, ClassifierService] | None = None,
                 reranker: RerankService | None = None, *, limits: Limits,
                 token: str | None = None, body_timeout_s: float | None = None,
                 allowed_hosts: AllowedHosts | None = None):
        self._nll = dict(nll)
        self._classifiers = dict(classifiers or {})
        self._reranker = reranker
        self.limits = limits
        self.token = token
        self.body_timeout_s = body_timeout_s
        self.allowed_hosts = allowed_hosts
        #: Every served model by name, dialogue models first; and whether any is a classifier.
        self.model_names = [*self._nll, *self._classifiers]
        self.has_classifiers = bool(self._classifiers)
        self._cards: dict[str, ModelCard] = {}

    def resolve(self, model: str | None, pool: Pool, param: str) -> str:
        """The served model for a request's `model` field: `pool` "nll" (causal/seq2seq) or
        "classifier"; None picks the default classifier, or the dialogue model where exactly one
        is served (none or several: 422 naming `param`). Unknown -> 404 naming `param`."""
        names = self._nll if pool == "nll" else self._classifiers
        if model is None and pool == "classifier" and names:
            return next(iter(names))
        if model is None and pool == "nll":
            if len(names) == 1:
                return next(iter(names))
            raise InputError(f"{param} is required: this deployment serves "
                             f"{len(names)} dialogue models ({', '.join(sorted(names)) or 'none'})",
                             param)
        if model not in names:
            kind = "dialogue (NLL) model" if pool == "nll" else "classifier"
            raise ServiceError("unknown_model", f"unknown {kind} {model!r}; served: "
                               f"{', '.join(sorted(names)) or 'none'}", param=param)
        return model

    def nll(self, model: str) -> NLLService:
        return self._nll[model]

    def classifier(self, model: str) -> ClassifierService:
        return self._classifiers[model]

    def reranker(self) -> RerankService:
        if self._reranker is None:
            raise ServiceError("unknown_model", "no classifier is served: nothing can rerank",
                               param="model")
        return self._reranker

    def _service(self, model: str) -> NLLService | ClassifierService:
        service = self._nll.get(model) or self._classifiers.get(model)
        if service is None:
            raise ServiceError("unknown_model", f"unknown model {model!r}; served: "
                               f"{', '.join(sorted(self.model_names))}", param="model")
        return service

    async def card(self, model: str) -> ModelCard:
        """The model's card (cached after the first answer)."""
        if model not in self._cards:
            self._cards[model] = await self._service(model).card()
        return self._cards[model]

    async def resolve_routes(self) -> None:
        """Fetch every model's card once, waiting for models still loading
        (contract/route_warmup.py): through Serve handles, this resolves every route."""
        self._cards.update(await resolve_routes({n: self._service(n) for n in self.model_names}))

    async def readiness(self) -> dict[str, str]:
        """Per model: ``ok`` when its card answers within READINESS_TIMEOUT_S, else
        ``unavailable: <reason>``."""
        async def probe(model: str) -> str:
            try:
                await asyncio.wait_for(self._service(model).card(), READINESS_TIMEOUT_S)
                return "ok"
            except Exception as exc:  # noqa: BLE001 - reported, not raised
                return f"unavailable: {type(exc).__name__}"

        return dict(zip(self.model_names, await asyncio.gather(*map(probe, self.model_names))))
