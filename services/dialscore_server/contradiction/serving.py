"""The contradiction endpoint's work on one replica, without Ray: admit a detection job (check its
pairing plan and turn ids), run merged jobs through the detector in one call, one reply per job.

The Serve deployment (deployment.py) wraps this with ``@serve.batch``; tests run it in-process
over a fake classifier.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from dialscore.model_card import ModelCard
from dialscore_server.contract.engine import Engine
from dialscore_server.contract.errors import InputError
from dialscore_server.contract.reply import Reply
from dialscore_server.contradiction.pairing import DetectionJob, DetectionResult, plan_pairs


class Detector(Engine, Protocol):
    """What the endpoint needs of its engine besides the lifecycle (see ContradictionDetector)."""

    def detect_many(self, jobs: Sequence[DetectionJob]) -> list[list[DetectionResult]]: ...


@dataclass
class Work:
    """One admitted job and the NLI pairs it costs (capped at the replica's max_batch_pairs)."""

    job: DetectionJob
    pairs: int


Runner = Callable[[Work], Awaitable[Reply[list[DetectionResult]]]]


class ContradictionServing:
    """Detects contradictions on one engine; a job larger than `max_batch_pairs` runs alone."""

    def __init__(self, engine: Detector, max_batch_pairs: int):
        self.engine = engine
        self.max_batch_pairs = max_batch_pairs
        self._card = engine.card()

    def card(self) -> ModelCard:
        return self._card

    def check_health(self) -> None:
        self.engine.check_health()

    def admit(self, job: DetectionJob) -> Work:
        """Plan the job's pairs (InputError naming ``dialogues[i].turns...``) and count them."""
        pairs = sum(len(plan_pairs(turns, job.mode, param=f"dialogues[{i}].turns"))
                    for i, turns in enumerate(job.dialogues))
        return Work(job, max(1, min(pairs, self.max_batch_pairs)))

    def run(self, works: Sequence[Work]) -> list[Reply[list[DetectionResult]]]:
        """One detector call for every job of `works`; one reply per work, in order."""
        start = time.perf_counter()
        outputs = self.engine.detect_many([w.job for w in works])
        compute = time.perf_counter() - start
        return [Reply(value=list(out), batch_requests=len(works), compute_s=compute)
                for out in outputs]

    async def run_alone(self, work: Work) -> Reply[list[DetectionResult]]:
        return (await asyncio.to_thread(self.run, [work]))[0]

    async def detect(self, job: DetectionJob, runner: Runner | None = None
                     ) -> Reply[list[DetectionResult]]:
        """The whole path of one request: admit it, hand it to `runner` (default: alone)."""
        try:
            work = self.admit(job)
        except InputError as exc:
            return Reply(error=exc)
        return await (runner or self.run_alone)(work)
