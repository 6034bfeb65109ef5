"""The base every model deployment stands on: from the arguments Serve passes to its engine."""

from __future__ import annotations

from typing import Any, ClassVar

from dialscore.model_card import ModelCard
from dialscore_server.checkpoints.registry import ModelConfig
from dialscore_server.contract.engine import build_engine
from dialscore_server.contract.options import ServingOptions


class ModelDeployment:
    """Validates the model's registry entry (`config`) and serving `options` as Serve passes them
    (dicts from the YAML, or the typed objects), builds the engine (``options.engine``, default
    :attr:`default_engine`) with its ``from_options`` on the replica's engine thread
    (``self.engine_thread``, where the serving a subclass sets as ``self.serving`` must run it),
    and answers `card` and `check_health` through that serving."""

    #: The engine class served when ``options.engine`` names none.
    default_engine: ClassVar[type]
    serving: Any

    def __init__(self, config: ModelConfig | dict[str, Any],
                 options: ServingOptions | dict[str, Any] | None = None):
        self.config = ModelConfig.model_validate(config)
        self.options = ServingOptions.model_validate(options or {})
        self.engine, self.engine_thread = build_engine(self.config, self.options,
                                                       self.default_engine)

    async def card(self) -> ModelCard:
        """The model's card (GET /v1/models, every response's provenance)."""
        return await self.serving.card()

    async def check_health(self) -> None:
        """Serve's periodic health check: the engine's real, tiny forward pass, run on the engine
        thread when no engine call is at work (see the serving's ``check_health``)."""
        await self.serving.check_health()
