"""What an endpoint's router may ask of the ingress it is mounted on.

Routers receive an object with this interface (the gateway deployment implements it over Serve
handles; tests implement it in-process over fake engines) and never import the gateway itself.
"""

from __future__ import annotations

from typing import Any, Literal, Protocol

from dialscore.model_card import ModelCard
from dialscore_server.contract.limits import Limits
from dialscore_server.contract.reply import Reply

#: Which pool a request's `model` names: dialogue (NLL) models or NLI classifiers.
Pool = Literal["nll", "classifier"]


class Backend(Protocol):
    """The models behind one ingress, and its limits."""

    limits: Limits

    def resolve(self, model: str | None, pool: Pool, param: str) -> str:
        """The served model a request's `model` field names; None picks the default classifier.
        Raises ``unknown_model`` (404) naming `param`."""
        ...

    async def call(self, model: str, method: str, *args: Any) -> Any:
        """Call a model deployment's `method` under the request's deadlines and return its answer
        (a :class:`~dialscore_server.contract.reply.Reply` for the scoring methods); a failure of
        the call itself (dead replica, full queue, deadline) raises the typed ServiceError."""
        ...

    async def call_rerank(self, *args: Any) -> Reply[Any]:
        """Call the rerank deployment (it composes detector and NLL deployments)."""
        ...

    async def card(self, model: str) -> ModelCard:
        """The model's card."""
        ...
