"""The Ray Serve deployment around :class:`~dialscore_server.contradiction.engine.ContradictionDetector`.

Each request's dialogues are checked (pairing plan, turn ids) before they join the batch queue;
`@serve.batch` then merges jobs from many requests, and the detector classifies all their pairs in
one token-budget-batched call. Errors come back as data (see services/dialscore_server/nll/deployment.py).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

from ray import serve

from dialscore_server.contradiction.engine import ContradictionDetector, DetectionJob, DetectionResult, plan_pairs
from dialscore_server.nll.engine import ScoringInputError
from dialscore_server.checkpoints.registry import ModelConfig

#: Upper bound of `max_batch_pairs` (Serve's max_batch_size, counted in NLI pairs).
MAX_BATCH_PAIRS = 4096


@dataclass
class DetectCall:
    job: DetectionJob
    pairs: int  # the job's pairs, capped at the replica's max_batch_pairs


@dataclass
class DetectReply:
    results: list[DetectionResult] = field(default_factory=list)
    error: dict | None = None
    batch_requests: int = 0
    compute_s: float = 0.0


def _batch_pairs(calls: list[DetectCall]) -> int:
    return sum(c.pairs for c in calls)


@serve.deployment(name="contradiction", max_ongoing_requests=64, ray_actor_options={"num_cpus": 0.5})
class ContradictionDeployment:
    """Hosts one NLI classifier. Methods: `detect`, `info`, `check_health`."""

    def __init__(self, config: dict[str, Any], token_budget: int | None = None, max_batch_pairs: int = 1024,
                 batch_wait_timeout_s: float = 0.005, num_threads: int | None = None):
        self.config = ModelConfig.model_validate(config)
        self.detector = ContradictionDetector(self.config, token_budget=token_budget,
                                              num_threads=num_threads)
        self.max_batch_pairs = min(max_batch_pairs, MAX_BATCH_PAIRS)
        self._batched.set_max_batch_size(self.max_batch_pairs)
        self._batched.set_batch_wait_timeout_s(batch_wait_timeout_s)

    def info(self) -> dict[str, Any]:
        c, loaded = self.config, self.detector.classifier.loaded
        return {"name": c.name, "family": c.family, "source": c.source,
                "revision": loaded.resolved_revision, "max_length": c.max_length, "dtype": c.dtype,
                "device": loaded.device, "stand_in": loaded.stand_in,
                "labels": list(self.detector.classifier.labels),
                "contradiction_index": self.detector.classifier.contradiction_index}

    def check_health(self) -> None:
        """A real forward pass on one pair."""
        self.detector.classifier.contradiction_probs([("I like fish.", "I never eat fish.")])

    async def detect(self, job: DetectionJob) -> DetectReply:
        try:
            pairs = sum(len(plan_pairs(turns, job.mode, param=f"dialogues[{i}].turns"))
                        for i, turns in enumerate(job.dialogues))
        except ScoringInputError as exc:
            return DetectReply(error={"type": "invalid_request", "message": str(exc), "param": exc.param})
        return await self._batched(DetectCall(job, max(1, min(pairs, self.max_batch_pairs))))

    @serve.batch(max_batch_size=1024, batch_wait_timeout_s=0.005, batch_size_fn=_batch_pairs)
    async def _batched(self, calls: list[DetectCall]) -> list[DetectReply]:
        start = time.perf_counter()
        outputs = await asyncio.to_thread(self.detector.detect_many, [c.job for c in calls])
        compute = time.perf_counter() - start
        return [DetectReply(results=list(out), batch_requests=len(calls), compute_s=compute)
                for out in outputs]
