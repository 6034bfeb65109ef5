"""The contradiction endpoint's work on one replica, without Ray: admit a detection job (check its
pairing plan and turn ids), cut it into chunks of about ``chunk_pairs`` NLI pairs (whole
dialogues; a dialogue's pairs are never split), run merged chunks of many jobs through the
detector in one call, put each job's answer back together.

Fair sharing and no orphan work as :mod:`dialscore_server.scheduling.chunks` describes: a job has at
most one chunk running and one queued, so a small request admitted behind a large one waits for
about one chunk; a cancelled request's chunks not yet computed are dropped and its pairs leave the
running call at the next pass or layer (:mod:`dialscore_server.scheduling.cancellation`); the ledger counts
pairs.

The Serve deployment (deployment.py) wraps this with ``@serve.batch``; tests run it in-process
over a fake classifier.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from dialscore.model_card import ModelCard
from dialscore_server.contract.engine import Engine
from dialscore_server.contract.errors import InputError
from dialscore_server.contract.reply import Reply
from dialscore_server.contradiction.engine.pairing import DetectionJob, DetectionResult, plan_pairs
from dialscore_server.scheduling.chunks import (
    Chunk, EngineThread, WorkLedger, abandoned_reply, run_in_turn,
)
from dialscore_server.scheduling.cancellation import CallGuard

#: Default chunk size in NLI pairs (ServingOptions.chunk_pairs).
CHUNK_PAIRS = 64


class Detector(Engine, Protocol):
    """What the endpoint needs of its engine besides the lifecycle (see ContradictionDetector)."""

    def detect_many(self, jobs: Sequence[DetectionJob], guard: CallGuard | None = None
                    ) -> list[list[DetectionResult] | None]: ...


@dataclass
class Work(Chunk):
    """One chunk of an admitted job and the NLI pairs it costs (at least 1, so an empty chunk
    still counts in a batch)."""

    job: DetectionJob
    pairs: int

    @property
    def cost(self) -> int:
        return self.pairs


Runner = Callable[[Work], Awaitable[Reply[list[DetectionResult]]]]


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
    return Work(part, max(1, pairs))


class ContradictionServing:
    """Detects contradictions on one engine, in chunks of `chunk_pairs` (capped at
    `max_batch_pairs`, the most one engine call merges). `model` labels the metrics."""

    def __init__(self, engine: Detector, max_batch_pairs: int, chunk_pairs: int = CHUNK_PAIRS,
                 model: str = ""):
        self.engine = engine
        self.max_batch_pairs = max_batch_pairs
        self.chunk_pairs = max(1, min(chunk_pairs, max_batch_pairs))
        self._card = engine.card()
        self.ledger = WorkLedger(model or self._card.name, "pairs")
        #: Runs the engine calls (``engine_thread.call`` is what ``@serve.batch`` awaits);
        #: without ``@serve.batch``, ``engine_thread.run_alone`` runs one chunk per call.
        self.engine_thread: EngineThread[Work, list[DetectionResult]] = EngineThread(self.run)

    def card(self) -> ModelCard:
        return self._card

    def check_health(self) -> None:
        self.engine.check_health()

    def admit(self, job: DetectionJob) -> list[Work]:
        """Plan the job's pairs (InputError naming ``dialogues[i].turns...``) and cut it into
        chunks (see :func:`chunk_job`)."""
        counts = [len(plan_pairs(turns, job.mode, param=f"dialogues[{i}].turns"))
                  for i, turns in enumerate(job.dialogues)]
        return chunk_job(job, counts, self.chunk_pairs)

    def run(self, works: Sequence[Work]) -> list[Reply[list[DetectionResult]]]:
        """One detector call for every chunk of `works`; one reply per work, in order. The
        detector stops computing a work cancelled while the call runs; such a work (nobody waits
        for it) gets an error reply."""
        got = self.ledger.call(
            works, lambda guard: self.engine.detect_many([w.job for w in works], guard))
        if got is None:
            return [abandoned_reply() for _ in works]
        outputs, compute = got
        return [abandoned_reply() if out is None else
                Reply(value=list(out), batch_requests=len(works), compute_s=compute)
                for out in outputs]

    async def detect(self, job: DetectionJob, runner: Runner | None = None
                     ) -> Reply[list[DetectionResult]]:
        """The whole path of one request: admit it, hand its chunks to `runner` (default: alone)
        one after the other, and join the answers. Cancelling the caller drops what is left."""
        try:
            works = self.admit(job)
        except InputError as exc:
            return Reply(error=exc)
        got = await run_in_turn(works, runner or self.engine_thread.run_alone, self.ledger)
        if got.error is not None:
            return got.error
        return Reply(value=[r for part in got.values for r in part],
                     batch_requests=got.batch_requests, compute_s=got.compute_s,
                     queue_s=got.queue_s)
