"""The Ray Serve deployment of a contradiction detector:
:class:`~dialscore_server.contradiction.serving.ContradictionServing` with ``@serve.batch``
merging jobs from many requests into one classifier call, sized in NLI pairs.

It receives the detector class (default
:class:`~dialscore_server.contradiction.engine.engine.ContradictionDetector`) and builds it with
``from_options``, so a test can serve a fake engine that loads no model.
"""

from __future__ import annotations

from typing import Any

from ray import serve

from dialscore.model_card import ModelCard
from dialscore_server.checkpoints.registry import ModelConfig
from dialscore_server.contract.options import ServingOptions
from dialscore_server.contract.reply import Reply
from dialscore_server.contradiction.engine.engine import ContradictionDetector
from dialscore_server.contradiction.engine.pairing import DetectionJob, DetectionResult
from dialscore_server.contradiction.serving import ContradictionServing, Detector, Work

#: Upper bound of a batch, counted in NLI pairs (Serve's max_batch_size).
MAX_BATCH_PAIRS = 4096


def _batch_pairs(works: list[Work]) -> int:
    return sum(w.pairs for w in works)


@serve.deployment(name="contradiction", max_ongoing_requests=64, ray_actor_options={"num_cpus": 0.5})
class ContradictionDeployment:
    """Hosts one NLI classifier. Methods: `detect`, `card`, `check_health`."""

    def __init__(self, config: ModelConfig | dict[str, Any],
                 options: ServingOptions | dict[str, Any] | None = None,
                 engine_cls: type[Detector] = ContradictionDetector):
        config = ModelConfig.model_validate(config)
        options = ServingOptions.model_validate(options or {})
        max_batch_pairs = min(options.max_batch_tokens, MAX_BATCH_PAIRS)
        self.serving = ContradictionServing(engine_cls.from_options(config, options), max_batch_pairs,
                                            chunk_pairs=options.chunk_pairs)
        self._batched.set_max_batch_size(max_batch_pairs)
        self._batched.set_batch_wait_timeout_s(options.batch_wait_timeout_s)

    def card(self) -> ModelCard:
        return self.serving.card()

    def check_health(self) -> None:
        self.serving.check_health()

    def work_stats(self) -> dict[str, float | str]:
        """This replica's work accounting (fair_chunks.WorkStats, in pairs): for tests and
        benchmarks; operators read the dialscore_work_* metrics."""
        return self.serving.ledger.stats.snapshot()

    async def detect(self, job: DetectionJob) -> Reply[list[DetectionResult]]:
        return await self.serving.detect(job, runner=self._batched)

    @serve.batch(max_batch_size=1024, batch_wait_timeout_s=0.005, batch_size_fn=_batch_pairs)
    async def _batched(self, works: list[Work]) -> list[Reply[list[DetectionResult]]]:
        return await self.serving.engine_thread.call(works)
