"""The contradiction endpoint's work on one replica, without Ray: admit a detection job (check its
pairing plan and turn ids), cut it into chunks, run merged chunks of many jobs through the detector
in one call, put each job's answer back together.

Fair sharing. A job is computed as chunks of about ``chunk_pairs`` NLI pairs (whole dialogues; a
dialogue's pairs are never split). :meth:`ContradictionServing.detect` hands the runner one chunk
at a time and waits for it before sending the next, so each waiting request has at most one chunk
in the replica's queue: a ``@serve.batch`` merge takes one chunk of every waiting request
(round-robin), and a small request admitted behind a large one waits for about one chunk, not for
the whole large job.

No orphan work. When the request is cancelled (the client went away, or the gateway's deadline
passed and it cancelled the call), its chunks not yet sent are never computed (``dropped``) and a
chunk still queued is removed by Serve; only the chunk already running finishes, for nobody
(``wasted``). :attr:`ContradictionServing.stats` and the ``dialscore_work_*`` metrics count both.

The Serve deployment (deployment.py) wraps this with ``@serve.batch``; tests run it in-process
over a fake classifier.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from dialscore.model_card import ModelCard
from dialscore_server import metrics
from dialscore_server.contract.engine import Engine
from dialscore_server.contract.errors import InputError
from dialscore_server.contract.reply import Reply
from dialscore_server.contradiction.pairing import DetectionJob, DetectionResult, plan_pairs

#: Default chunk size in NLI pairs (ServingOptions.chunk_pairs).
CHUNK_PAIRS = 64


class Detector(Engine, Protocol):
    """What the endpoint needs of its engine besides the lifecycle (see ContradictionDetector)."""

    def detect_many(self, jobs: Sequence[DetectionJob]) -> list[list[DetectionResult]]: ...


@dataclass
class Work:
    """One chunk of an admitted job and the NLI pairs it costs (at least 1, so an empty chunk
    still counts in a batch). `started`/`cancelled` are set by the replica: the chunk's engine
    call began; nobody waits for the chunk any more."""

    job: DetectionJob
    pairs: int
    started: bool = False
    cancelled: bool = False


@dataclass
class WorkStats:
    """What this replica computed, in pairs and seconds of engine time. ``wasted`` is work
    computed for a request that was cancelled meanwhile, ``dropped`` work never computed because
    its request was cancelled; ``wasted_s / busy_s`` is the share of replica time nobody waited
    for."""

    done_pairs: int = 0
    wasted_pairs: int = 0
    dropped_pairs: int = 0
    in_flight_pairs: int = 0
    busy_s: float = 0.0
    wasted_s: float = 0.0
    chunks: int = 0
    calls: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def snapshot(self) -> dict[str, float]:
        with self._lock:
            return {k: v for k, v in vars(self).items() if not k.startswith("_")}


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
        self.model = model or self._card.name
        self.stats = WorkStats()

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
        """One detector call for every chunk of `works`; one reply per work, in order."""
        for w in works:
            w.started = True
        start = time.perf_counter()
        outputs = self.engine.detect_many([w.job for w in works])
        compute = time.perf_counter() - start
        total = sum(w.pairs for w in works)
        with self.stats._lock:
            self.stats.busy_s += compute
            self.stats.calls += 1
            self.stats.chunks += len(works)
            for w in works:
                if w.cancelled:
                    self.stats.wasted_s += compute * w.pairs / total
        return [Reply(value=list(out), batch_requests=len(works), compute_s=compute)
                for out in outputs]

    async def run_alone(self, work: Work) -> Reply[list[DetectionResult]]:
        return (await asyncio.to_thread(self.run, [work]))[0]

    async def detect(self, job: DetectionJob, runner: Runner | None = None
                     ) -> Reply[list[DetectionResult]]:
        """The whole path of one request: admit it, hand its chunks to `runner` (default: alone)
        one after the other, and join the answers. Cancelling the caller drops what is left."""
        try:
            works = self.admit(job)
        except InputError as exc:
            return Reply(error=exc)
        run = runner or self.run_alone
        total = sum(w.pairs for w in works)
        self._count_in_flight(total)
        results: list[DetectionResult] = []
        compute = queue = 0.0
        merged = 0
        k = 0
        try:
            for k, work in enumerate(works):
                sent = time.perf_counter()
                reply = await run(work)
                if reply.error is not None:
                    self._finish(works[k + 1:], "dropped")
                    return reply
                self._finish([work], "done")
                results += reply.value or []
                compute += reply.compute_s
                queue += max(0.0, time.perf_counter() - sent - reply.compute_s)
                merged = max(merged, reply.batch_requests)
        except asyncio.CancelledError:
            current = works[k]
            current.cancelled = True
            self._finish([current], "wasted" if current.started else "dropped")
            self._finish(works[k + 1:], "dropped")
            raise
        except BaseException:  # the engine call failed: nothing more is computed for this request
            self._finish(works[k:], "dropped")
            raise
        return Reply(value=results, batch_requests=merged, compute_s=compute, queue_s=queue)

    # ---------------------------------------------------------------------------- accounting
    def _count_in_flight(self, pairs: int) -> None:
        with self.stats._lock:
            self.stats.in_flight_pairs += pairs
        metrics.WORK_IN_FLIGHT.labels(self.model, "pairs").inc(pairs)

    def _finish(self, works: Sequence[Work], how: str) -> None:
        pairs = sum(w.pairs for w in works)
        if not pairs:
            return
        with self.stats._lock:
            self.stats.in_flight_pairs -= pairs
            setattr(self.stats, f"{how}_pairs", getattr(self.stats, f"{how}_pairs") + pairs)
        metrics.WORK_IN_FLIGHT.labels(self.model, "pairs").dec(pairs)
        if how == "done":
            metrics.WORK_DONE.labels(self.model, "pairs").inc(pairs)
        else:
            metrics.WORK_ABANDONED.labels(self.model, "pairs", how).inc(pairs)
