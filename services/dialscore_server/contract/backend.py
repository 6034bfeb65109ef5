"""What every endpoint's router may ask of the ingress it is mounted on.

Routers receive an object with this interface and never import the gateway. Each endpoint's
router extends it with the typed model services it calls (``NLLBackend.nll(model)``,
``ClassifierBackend.classifier(model)``, ``RerankBackend.reranker()``); the gateway's
:class:`~dialscore_server.directory.ModelDirectory` implements them all, over Serve
handles in a replica and over in-process servings in tests.
"""

from __future__ import annotations

from typing import Literal, Protocol

from dialscore.model_card import ModelCard
from dialscore_server.contract.limits import Limits

#: Which pool a request's `model` names: dialogue (NLL) models or NLI classifiers.
Pool = Literal["nll", "classifier"]


class Backend(Protocol):
    """The models behind one ingress, and its limits."""

    limits: Limits

    def resolve(self, model: str | None, pool: Pool, param: str) -> str:
        """The served model a request's `model` field names; None picks the default classifier,
        or the dialogue model where exactly one is served (else ``invalid_request``, 422, naming
        `param`). Raises ``unknown_model`` (404) naming `param`."""
        ...

    async def card(self, model: str) -> ModelCard:
        """The served model's card."""
        ...
