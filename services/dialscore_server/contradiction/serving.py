"""The contradiction endpoint's work on one replica, without Ray: admit a detection job (check its
pairing plan and turn ids), cut it into chunks of about ``chunk_pairs`` NLI pairs (whole
dialogues; a dialogue's pairs are never split), and run merged chunks of many jobs through the
detector in one call (:mod:`dialscore_server.scheduling`); put each job's answer back together.

The Serve deployment (deployment.py) builds this with Serve's batching runner; tests build it
in-process over a fake classifier.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from dialscore.model_card import ModelCard
from dialscore_server import metrics
from dialscore_server.contract.backend import Backend
from dialscore_server.contract.engine import Engine
from dialscore_server.contract.options import ServingOptions
from dialscore_server.contract.priority import Lane
from dialscore_server.contract.reply import Reply
from dialscore_server.contradiction.engine.pairing import DetectionJob, DetectionResult, plan_pairs
from dialscore_server.scheduling.cancellation import CallGuard
from dialscore_server.scheduling.chunks import Chunk
from dialscore_server.scheduling.device_gate import DeviceGate, GatedCalls
from dialscore_server.contract.options import CpuPriority
from dialscore_server.scheduling.lanes import LanePolicy
from dialscore_server.scheduling.serving import (
    ChunkedServing, RunnerFactory, one_at_a_time, replica_schedule,
)

#: Default chunk size in NLI pairs (ServingOptions.chunk_pairs).
CHUNK_PAIRS = 64


class Detector(Engine, Protocol):
    """What the endpoint needs of its engine besides the lifecycle (see ContradictionDetector)."""

    def detect_many(self, jobs: Sequence[DetectionJob], guard: CallGuard | None = None
                    ) -> list[list[DetectionResult] | None]: ...


class ClassifierService(Protocol):
    """An NLI classifier as the routers and the rerank serving call it: in-process
    (:class:`ContradictionServing`) or over Ray Serve
    (:class:`~dialscore_server.contradiction.deployment.ClassifierHandle`)."""

    async def detect(self, job: DetectionJob, lane: Lane = "interactive"
                     ) -> Reply[list[DetectionResult]]:
        """One result per dialogue of `job`, in order (see
        :mod:`dialscore_server.contradiction.engine.engine`), asking for the priority `lane` (the
        reply says the lane used); bad input is the reply's InputError, naming
        ``dialogues[i]...``."""
        ...

    async def card(self) -> ModelCard:
        """The classifier's card."""
        ...


class ClassifierBackend(Backend, Protocol):
    """The ingress as POST /v1/contradiction sees it."""

    def classifier(self, model: str) -> ClassifierService:
        """The served classifier `model` (a name :meth:`resolve` returned)."""
        ...


@dataclass
class Work(Chunk):
    """One chunk of an admitted job and the NLI pairs it costs (at least 1, so an empty chunk
    still counts in a batch)."""

    job: DetectionJob
    pairs: int

    @property
    def cost(self) -> int:
        return self.pairs


def chunk_job(job: DetectionJob, pair_counts: Sequence[int], chunk_pairs: int) -> list[Work]:
    """Cut `job` into consecutive runs of whole dialogues of at most `chunk_pairs` pairs each (a
    dialogue with more pairs forms its own chunk); every dialogue is in exactly one chunk, in
    order."""
    works: list[Work] = []
    start, size = 0, 0
    n = len(job.dialogues)
    for i in range(n):
        if i > start and size + pair_counts[i] > chunk_pairs:
            works.append(_work(job, start, i, size))
            start, size = i, 0
        size += pair_counts[i]
    works.append(_work(job, start, n, size))
    return works


def _work(job: DetectionJob, start: int, stop: int, pairs: int) -> Work:
    part = DetectionJob(dialogues=list(job.dialogues[start:stop]), mode=job.mode,
                        threshold=job.threshold, evidence_threshold=job.evidence_threshold)
    return Work(job=part, pairs=max(1, pairs))


#: Upper bound of a batch, counted in NLI pairs.
MAX_BATCH_PAIRS = 4096


class ContradictionServing:
    """Detects contradictions on one engine, in chunks of `chunk_pairs` (capped at
    `max_batch_pairs`, the most one engine call merges). `model` labels the metrics (default:
    the card's name); `runner` is how chunks meet the engine
    (:mod:`dialscore_server.scheduling.serving`); `lanes` the priority-lane policy (default: lanes
    on, a request of more than one chunk's pairs served in the bulk lane); `stall_s` and `clock`
    the health check's bound on an engine call without progress (:meth:`check_health`);
    `priority` the engine thread's CPU priority; `gate` how its engine calls meet the device's gate
    (:class:`~dialscore_server.scheduling.device_gate.GatedCalls`; None: none)."""

    def __init__(self, engine: Detector, *, max_batch_pairs: int, chunk_pairs: int = CHUNK_PAIRS,
                 model: str = "", runner: RunnerFactory = one_at_a_time,
                 lanes: LanePolicy | None = None, stall_s: float | None = None,
                 priority: CpuPriority = "normal", gate: GatedCalls | None = None,
                 clock: Callable[[], float] = time.monotonic):
        self.engine = engine
        self.max_batch_pairs = max_batch_pairs
        self.chunk_pairs = max(1, min(chunk_pairs, max_batch_pairs))
        self._card = engine.card()
        self.model = model or self._card.name
        self.chunks: ChunkedServing[Work, list[DetectionResult]] = ChunkedServing(
            self.run, model=self.model, unit="pairs", runner=runner,
            lanes=lanes or LanePolicy(interactive_max_cost=self.chunk_pairs), stall_s=stall_s,
            priority=priority, gate=gate, clock=clock)

    @classmethod
    def from_options(cls, engine: Detector, options: ServingOptions, model: str,
                     gate: DeviceGate | None = None) -> ContradictionServing:
        """The serving a classifier's replica runs (and a batch worker, the same): an engine
        call's budget of `options.max_batch_tokens` NLI pairs (at most :data:`MAX_BATCH_PAIRS`),
        chunks of `options.chunk_pairs`, scheduled by
        :func:`~dialscore_server.scheduling.serving.replica_schedule`."""
        budget = min(options.max_batch_tokens, MAX_BATCH_PAIRS)
        return cls(engine, max_batch_pairs=budget, chunk_pairs=options.chunk_pairs, model=model,
                   **replica_schedule(options, budget, options.chunk_pairs, gate))

    async def card(self) -> ModelCard:
        return self._card

    async def check_health(self) -> None:
        """The engine's health check, on the engine thread when it is idle; an engine call that
        shows no progress for longer than `stall_s` fails it (see
        :meth:`ChunkedServing.check_health <dialscore_server.scheduling.serving.ChunkedServing.check_health>`)."""
        await self.chunks.check_health(self.engine.check_health)

    def admit(self, job: DetectionJob) -> list[Work]:
        """Plan the job's pairs (InputError naming ``dialogues[i].turns...``) and cut it into
        chunks (see :func:`chunk_job`)."""
        counts = [len(plan_pairs(turns, job.mode, param=f"dialogues[{i}].turns"))
                  for i, turns in enumerate(job.dialogues)]
        return chunk_job(job, counts, self.chunk_pairs)

    def run(self, works: Sequence[Work], guard: CallGuard
             ) -> tuple[list[list[DetectionResult] | None], None]:
        """One detector call for every chunk of `works`; None for a work the guard left out."""
        return self.engine.detect_many([w.job for w in works], guard), None

    async def detect(self, job: DetectionJob, lane: Lane = "interactive"
                     ) -> Reply[list[DetectionResult]]:
        """See :meth:`ClassifierService.detect`. Cancelling the caller drops what is left."""
        reply = await self.chunks.serve(lambda: self.admit(job), lane)
        if reply.error is not None:
            return Reply(error=reply.error, lane=reply.lane)
        results = [r for part in reply.unwrap() for r in part]
        metrics.ITEMS.labels(self.model).inc(len(results))
        return Reply(value=results, compute_s=reply.compute_s, queue_s=reply.queue_s,
                     tokenize_s=reply.tokenize_s, lane=reply.lane)
