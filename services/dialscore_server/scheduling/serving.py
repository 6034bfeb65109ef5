"""One chunked serving for every endpoint: admit, cut into chunks, take turns, run on the engine
thread. An endpoint supplies how it admits a request and how it runs a batch of chunks; the
runner, how chunks meet the engine, is fixed once, at construction: :func:`one_at_a_time`
in-process (each chunk its own engine call, in turn), :func:`serve_batch` in a Serve replica (Ray
Serve's ``@serve.batch`` merges the chunks waiting in the replica's queue up to a budget counted
in :attr:`Chunk.size <dialscore_server.scheduling.chunks.Chunk.size>`)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Generic, Protocol, TypeVar

from dialscore_server import metrics
from dialscore_server.contract.errors import InputError, ServiceError
from dialscore_server.contract.reply import Reply
from dialscore_server.scheduling.arrivals import Arrivals
from dialscore_server.scheduling.cancellation import CallGuard
from dialscore_server.scheduling.chunks import Chunk, Outcome, Runner, take_turns
from dialscore_server.scheduling.engine_thread import EngineThread
from dialscore_server.scheduling.ledger import WorkLedger

C = TypeVar("C", bound=Chunk)
V = TypeVar("V")


#: One engine call for a batch of chunks: one outcome per chunk, in order.
EngineCall = Callable[[Sequence[C]], Awaitable[list[Outcome[V]]]]
#: Builds a serving's runner from its engine call.
RunnerFactory = Callable[[EngineCall[Any, Any]], Runner[Any, Any]]


def one_at_a_time(call: EngineCall[C, V]) -> Runner[C, V]:
    """Each chunk is its own engine call. Calls run one at a time, in the order they are asked
    for (the serving's one engine thread takes them in turn, as a replica runs one batch at a
    time), so a request's next chunk, sent when the current one begins, waits its turn."""

    async def run(chunk: C) -> Outcome[V]:
        return (await call([chunk]))[0]

    return run


def serve_batch(max_batch_size: int, batch_wait_timeout_s: float) -> RunnerFactory:
    """Ray Serve's ``@serve.batch`` over the engine call: a batch starts `batch_wait_timeout_s`
    after its first chunk arrives and merges the chunks waiting then, up to `max_batch_size`
    counted in chunk sizes (a chunk larger than that alone is a batch of its own). Used inside a
    Serve replica (the deployment's ``max_ongoing_requests`` must exceed the chunks one batch
    merges)."""

    def make(call: EngineCall[C, V]) -> Runner[C, V]:
        from ray import serve

        async def engine_call(chunks: list[C]) -> list[Outcome[V]]:
            return await call(chunks)

        return serve.batch(max_batch_size=max_batch_size,
                           batch_wait_timeout_s=batch_wait_timeout_s,
                           batch_size_fn=lambda chunks: sum(c.size for c in chunks))(engine_call)

    return make


class BatchReport(Protocol):
    """What an engine call may report about the work it did (the engines' batch statistics)."""

    items: int
    real_tokens: int

    @property
    def padding_waste(self) -> float: ...

    @property
    def reused_tokens(self) -> int: ...


#: One engine call: the values of `chunks` in order (None for a chunk the guard left out), and
#: the call's statistics when the engine reports any.
Run = Callable[[Sequence[C], CallGuard], "tuple[list[V | None], BatchReport | None]"]


class ChunkedServing(Generic[C, V]):
    """Serves requests of one model replica in chunks that take turns on its engine (see the
    package docstring).

    Args:
        run: one engine call over merged chunks (called on the engine thread).
        model: the model's name (metric labels).
        unit: the unit of chunk costs in the work ledger ("tokens", "pairs").
        runner: builds the runner from the engine call: :func:`one_at_a_time` (in-process, the
            default) or :func:`~dialscore_server.scheduling.serving.serve_batch` (a replica).

    Metrics are recorded here, where they are measured: each engine call's batch figures
    (``dialscore_batch_*``, padding, reused tokens) and the work ledger's."""

    def __init__(self, run: Run[C, V], *, model: str, unit: str,
                 runner: RunnerFactory = one_at_a_time):
        self._run = run
        self.model = model
        self.ledger = WorkLedger(model, unit)
        self.arrivals = Arrivals()
        self._engine_thread: EngineThread[C, list[Outcome[V]]] = EngineThread(self.call)
        self._runner = runner(self._engine_thread.call)

    def call(self, chunks: Sequence[C]) -> list[Outcome[V]]:
        """One accounted engine call for `chunks`, on the calling thread (the runner calls it on
        the engine thread): one outcome per chunk, in order."""
        got = self.ledger.call(chunks, lambda guard: self._run(chunks, guard))
        if got is None:
            return [Outcome(None, 0.0) for _ in chunks]
        (values, report), seconds = got
        metrics.BATCH_REQUESTS.labels(self.model).observe(len(chunks))
        if report is not None:
            metrics.BATCH_SIZE.labels(self.model).observe(report.items)
            metrics.BATCH_TOKENS.labels(self.model).observe(report.real_tokens)
            metrics.PADDING_WASTE.labels(self.model).observe(report.padding_waste)
            metrics.REUSED_TOKENS.labels(self.model).inc(report.reused_tokens)
        return [Outcome(v, seconds) for v in values]

    async def serve(self, admit: Callable[[], list[C]]) -> Reply[list[V]]:
        """The whole path of one request: ``admit()`` off the event loop (its InputError is the
        reply's error), then its chunks in turn; the values of its chunks in order. Cancelling
        the caller drops what is left. ``tokenize_s`` is admission's time; ``queue_s`` includes
        the wait for requests admitted alongside (:mod:`~dialscore_server.scheduling.arrivals`)."""
        try:
            chunks, admit_s, waited = await self.arrivals.admit(admit)
        except InputError as exc:
            return Reply(error=exc)
        try:
            turns = await take_turns(chunks, self._runner, self.ledger)
        except ServiceError as exc:
            return Reply(error=exc)
        return Reply(value=turns.values, compute_s=turns.compute_s, queue_s=turns.queue_s + waited,
                     tokenize_s=admit_s)
