"""The base every model deployment stands on: from the arguments Serve passes to its engine."""

from __future__ import annotations

from typing import Any, ClassVar

from dialscore.model_card import ModelCard
from dialscore_server.checkpoints.registry import ModelConfig
from dialscore_server.contract.engine import engine_class
from dialscore_server.contract.options import ServingOptions
from dialscore_server.heap import freeze_loaded_heap


class ModelDeployment:
    """Validates the model's registry entry (`config`) and serving `options` as Serve passes them
    (dicts from the YAML, or the typed objects), builds the engine (``options.engine``, default
    :attr:`default_engine`) with its ``from_options``, and answers `card` and `check_health`
    through the endpoint's serving, which a subclass sets as ``self.serving``. Once the engine is
    built, the replica's heap is frozen (:func:`~dialscore_server.heap.freeze_loaded_heap`): the
    garbage collector's full collections then skip everything loaded so far.

    The engine is built here, on Serve's thread, and called on the serving's engine thread: two
    OpenMP teams. On a shared 2-core host that measured faster for interactive requests than
    building it on the engine thread (one team, whose spin-wait takes cores from the other
    replicas), and slower for a lone replica's small bulk calls
    (docs/benchmarks/fairness.md#lanes)."""

    #: The engine class served when ``options.engine`` names none.
    default_engine: ClassVar[type]
    serving: Any

    def __init__(self, config: ModelConfig | dict[str, Any],
                 options: ServingOptions | dict[str, Any] | None = None):
        self.config = ModelConfig.model_validate(config)
        self.options = ServingOptions.model_validate(options or {})
        self.engine = engine_class(self.options.engine, self.default_engine).from_options(
            self.config, self.options)
        freeze_loaded_heap()

    async def card(self) -> ModelCard:
        """The model's card (GET /v1/models, every response's provenance)."""
        return await self.serving.card()

    async def check_health(self) -> None:
        """Serve's periodic health check: the engine's real, tiny forward pass, run on the engine
        thread when no engine call is at work (see the serving's ``check_health``)."""
        await self.serving.check_health()
