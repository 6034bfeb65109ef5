"""The Ray Serve deployment of a contradiction detector, and the typed handle that calls it.

:class:`ContradictionDeployment` hosts one NLI classifier: a
:class:`~dialscore_server.contradiction.serving.ContradictionServing` whose chunks meet the
detector through the replica's lane queue (:func:`~dialscore_server.scheduling.serving.merged`), merging jobs from many requests into one classifier call sized
in NLI pairs. It builds its detector with the class's ``from_options`` (``serving.engine``,
default :class:`~dialscore_server.contradiction.engine.engine.ContradictionDetector`), so a test
can serve a fake engine that loads no model.

:class:`ClassifierHandle` is :class:`~dialscore_server.contradiction.serving.ClassifierService`
over a Serve handle of that deployment: what the gateway and the rerank deployment call.
"""

from __future__ import annotations

from typing import Any

from ray import serve

from dialscore.model_card import ModelCard
from dialscore_server.checkpoints.registry import ModelConfig
from dialscore_server.contract.deadline import Deadlines
from dialscore_server.contract.deployment import ModelDeployment
from dialscore_server.contract.options import ServingOptions
from dialscore_server.contract.reply import Reply
from dialscore_server.contradiction.engine.engine import ContradictionDetector
from dialscore_server.contradiction.engine.pairing import DetectionJob, DetectionResult
from dialscore_server.contradiction.serving import ContradictionServing
from dialscore_server.scheduling.device_gate import device_gate
from dialscore_server.contract.priority import Lane


@serve.deployment(name="contradiction", max_ongoing_requests=64, ray_actor_options={"num_cpus": 0.5})
class ContradictionDeployment(ModelDeployment):
    """Hosts one NLI classifier: `detect`, `card`, `check_health`."""

    default_engine = ContradictionDetector

    def __init__(self, config: ModelConfig | dict[str, Any],
                 options: ServingOptions | dict[str, Any] | None = None):
        super().__init__(config, options)
        self.serving = ContradictionServing.from_options(
            self.engine, self.options, self.config.name,
            gate=device_gate(self.engine.card().device))

    async def detect(self, job: DetectionJob, lane: Lane = "interactive"
                     ) -> Reply[list[DetectionResult]]:
        return await self.serving.detect(job, lane)


class ClassifierHandle:
    """:class:`~dialscore_server.contradiction.serving.ClassifierService` over a Serve handle of
    a :class:`ContradictionDeployment`, every call under `deadlines` (labelled `model`)."""

    def __init__(self, handle: Any, deadlines: Deadlines, model: str):
        self._handle, self._deadlines, self._model = handle, deadlines, model

    async def detect(self, job: DetectionJob, lane: Lane = "interactive"
                     ) -> Reply[list[DetectionResult]]:
        return await self._deadlines.call(self._handle.detect.remote(job, lane), self._model)

    async def card(self) -> ModelCard:
        return await self._deadlines.call(self._handle.card.remote(), self._model)
