"""The engine protocol: what every model deployment hosts, in the style of Ray's LLM serving.

An engine is a plain Python object that runs without Ray (tests drive it directly). A deployment
receives the engine *class* (default: the real one) and builds it with :meth:`Engine.from_options`,
so a deployment test can ``serve.run`` a fake engine that loads no model. Each endpoint's
deployment declares the operations it needs on top of these (``score_encoded`` for NLL,
``detect_many`` for the detector); the engine's own module documents what they compute.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable

from dialscore_server.contract.import_path import imported

if TYPE_CHECKING:
    from typing_extensions import Self

    from dialscore.model_card import ModelCard
    from dialscore_server.checkpoints.registry import ModelConfig
    from dialscore_server.contract.options import ServingOptions


@runtime_checkable
class Engine(Protocol):
    """Lifecycle and identity of an engine."""

    @classmethod
    def from_options(cls, config: ModelConfig, options: ServingOptions) -> Self:
        """Build the engine for the registry entry `config`, served with `options`."""
        ...

    def card(self) -> ModelCard:
        """The served model's card (GET /v1/models, and the provenance every response carries)."""
        ...

    def check_health(self) -> None:
        """Raise if the engine cannot serve (a real, tiny forward pass). A replica calls it on its
        engine thread, never beside an engine call
        (:meth:`~dialscore_server.scheduling.serving.ChunkedServing.check_health`)."""
        ...

    def close(self) -> None:
        """Release the model (memory, threads); the engine is unusable afterwards."""
        ...


def engine_class(path: str | None, default: type) -> type:
    """The engine class an import path (``package.module:Class``, ServingOptions.engine) names, or
    `default` when `path` is None. Raises ValueError naming the path when it cannot be imported or
    the class lacks the engine protocol's methods."""
    if path is None:
        return default
    cls = imported(path, "engine")
    missing = [m for m in ("from_options", "card", "check_health", "close") if not hasattr(cls, m)]
    if not isinstance(cls, type) or missing:
        raise ValueError(f"engine {path!r} is not an engine class (missing {', '.join(missing)})")
    return cls
