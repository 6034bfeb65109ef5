"""One chunked serving for every endpoint: admit, cut into chunks, take turns, run on the engine
thread. An endpoint supplies how it admits a request and how it runs a batch of chunks; the
runner, how chunks meet the engine, is fixed once, at construction: :func:`one_at_a_time`
in-process (each chunk its own engine call, in turn), :func:`merged` in a Serve replica (each
engine call merges the chunks waiting in the replica's queue up to a budget counted in
:attr:`Chunk.size <dialscore_server.scheduling.chunks.Chunk.size>`). Both are a
:class:`~dialscore_server.scheduling.lanes.LaneQueue`: interactive chunks before bulk ones."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Sequence
from typing import Any, Generic, Protocol, TypedDict, TypeVar

from dialscore_server import metrics
from dialscore_server.contract.errors import InputError, ServiceError
from dialscore_server.contract.options import CpuPriority, ServingOptions
from dialscore_server.contract.priority import Lane
from dialscore_server.contract.reply import Reply
from dialscore_server.scheduling.arrivals import Arrivals
from dialscore_server.scheduling.cancellation import CallGuard
from dialscore_server.scheduling.chunks import Chunk, Outcome, Runner, take_turns
from dialscore_server.scheduling.device_gate import DeviceGate, GatedCalls
from dialscore_server.scheduling.engine_thread import EngineThread
from dialscore_server.scheduling.lanes import EngineCall, LanePolicy, LaneQueue
from dialscore_server.scheduling.ledger import WorkLedger

C = TypeVar("C", bound=Chunk)
V = TypeVar("V")


#: When interactive work outside the serving was last about (monotonic seconds; None: never).
InteractiveSeen = Callable[[], "float | None"]


class RunnerFactory(Protocol):
    """Builds a serving's runner from its engine call, the serving's lane `policy`, the `model`
    and `unit` that label the lane metrics, and `interactive_seen`, when interactive work beyond
    the serving's own was last about (the
    :class:`~dialscore_server.scheduling.lanes.LaneQueue`'s argument)."""

    def __call__(self, call: EngineCall[Any, Any], *, policy: LanePolicy, model: str,
                 unit: str, interactive_seen: InteractiveSeen | None = None
                 ) -> Runner[Any, Any]: ...


def one_at_a_time(call: EngineCall[C, V], *, policy: LanePolicy = LanePolicy(), model: str = "",
                  unit: str = "", interactive_seen: InteractiveSeen | None = None
                  ) -> Runner[C, V]:
    """Each chunk is its own engine call. Calls run one at a time, interactive chunks first
    (:class:`~dialscore_server.scheduling.lanes.LaneQueue` with one chunk per call), so a
    request's next chunk, sent when the current one begins, waits its turn."""
    return LaneQueue(call, policy=policy, model=model, unit=unit,
                     interactive_seen=interactive_seen)


def merged(max_batch_size: int, batch_wait_timeout_s: float) -> RunnerFactory:
    """Engine calls that merge the chunks waiting in the replica's queue, as Ray Serve's
    ``@serve.batch`` did before lanes: a call starts `batch_wait_timeout_s` after its oldest chunk
    arrived (or once the waiting chunks fill it) and merges up to `max_batch_size` counted in
    chunk sizes (a chunk larger than that alone is a call of its own), interactive chunks first
    (:class:`~dialscore_server.scheduling.lanes.LaneQueue`). Used inside a Serve replica (the
    deployment's ``max_ongoing_requests`` must exceed the chunks one call merges)."""

    def make(call: EngineCall[C, V], *, policy: LanePolicy, model: str, unit: str,
             interactive_seen: InteractiveSeen | None = None) -> Runner[C, V]:
        return LaneQueue(call, max_batch_size=max_batch_size,
                         batch_wait_timeout_s=batch_wait_timeout_s, policy=policy, model=model,
                         unit=unit, interactive_seen=interactive_seen)

    return make


class Schedule(TypedDict):
    """How a :class:`ChunkedServing` schedules its engine calls: its constructor's arguments of
    the same names."""

    runner: RunnerFactory
    lanes: LanePolicy
    stall_s: float | None
    priority: CpuPriority
    gate: GatedCalls | None


def lane_policy(options: ServingOptions, chunk: int) -> LanePolicy:
    """The priority-lane policy of a model's replicas with `options`, where `chunk` is the size
    of its chunks (the interactive lane's cap when ``options.interactive_max_cost`` is unset)."""
    cap = options.interactive_max_cost if options.interactive_max_cost is not None else chunk
    return LanePolicy(enabled=options.priority_lanes, bulk_every=options.bulk_every,
                      interactive_max_cost=cap, bulk_max_batch=options.bulk_max_batch,
                      bulk_max_batch_hold_s=options.bulk_max_batch_hold_s)


def gated_calls(options: ServingOptions, gate: DeviceGate | None) -> GatedCalls | None:
    """How a model's engine calls meet `gate`, its device's gate on the replica's node (None, as
    in a batch worker or in-process: no gate): yielding for at most
    ``options.yield_to_interactive_s`` per call when that is set (at the call's pause points too
    with ``options.yield_inside_calls``), else holding it while interactive requests are in the
    replica."""
    return None if gate is None else GatedCalls(gate, options.yield_to_interactive_s,
                                                inside=options.yield_inside_calls)


def replica_schedule(options: ServingOptions, budget: int, chunk: int,
                     gate: DeviceGate | None = None) -> Schedule:
    """The schedule of a replica (or a batch worker) serving a model with `options`: engine
    calls :func:`merged` up to `budget` (in chunk sizes: tokens or pairs), the options' lane
    policy with chunks of `chunk` (at most `budget`: the default cap of the interactive lane),
    an engine call without progress beyond ``options.engine_stall_s`` failing the health check, the
    engine thread at ``options.engine_priority``; with `gate` (a replica's: its device's),
    engine calls meet it as ``options.yield_to_interactive_s`` says."""
    return Schedule(runner=merged(budget, options.batch_wait_timeout_s),
                    lanes=lane_policy(options, min(chunk, budget)),
                    stall_s=options.engine_stall_s, priority=options.engine_priority,
                    gate=gated_calls(options, gate))


class BatchReport(Protocol):
    """What an engine call may report about the work it did (the engines' batch statistics)."""

    items: int
    real_tokens: int

    @property
    def padding_waste(self) -> float: ...

    @property
    def reused_tokens(self) -> int: ...

    # The NLL engine's context cache (0 from engines without one).
    cached_tokens: int
    cache_hits: int
    cache_misses: int
    cache_evictions: int
    cache_bytes: int


#: One engine call: the values of `chunks` in order (None for a chunk the guard left out), and
#: the call's statistics when the engine reports any.
Run = Callable[[Sequence[C], CallGuard], "tuple[list[V | None], BatchReport | None]"]

#: Cuts one request's chunks again, in order, into chunks of at most the given size each (a unit
#: of work larger than that alone is a chunk of its own): how a serving whose chunks can be cut
#: finer (NLL models: whole items) keeps bulk engine calls within ``bulk_max_batch``.
Rechunk = Callable[[list[C], int], list[C]]


class EngineStalled(RuntimeError):
    """The health check's verdict on an engine call that has shown no progress for longer than
    the serving's `stall_s`: the replica is taken for hung, and Serve replaces it."""


class ChunkedServing(Generic[C, V]):
    """Serves requests of one model replica in chunks that take turns on its engine (see the
    package docstring).

    Args:
        run: one engine call over merged chunks (called on the engine thread).
        model: the model's name (metric labels).
        unit: the unit of chunk costs in the work ledger ("tokens", "pairs").
        runner: builds the runner from the engine call: :func:`one_at_a_time` (in-process, the
            default) or :func:`merged` (a replica).
        lanes: the lane policy: what may enter the interactive lane, and how the runner shares
            engine calls between the lanes (:class:`~dialscore_server.scheduling.lanes.LanePolicy`).
        rechunk: how a request's chunks are cut finer (:data:`Rechunk`), or None where they
            cannot be. With it, a bulk request whose chunks are larger than the policy's
            ``bulk_max_batch`` is cut to that size at admission, so a bulk engine call (and so an
            interactive request's wait for the one running) stays within the bound; without
            it, a chunk larger than the bound is a bulk call of its own.
        stall_s: an engine call that shows no progress for longer than this many seconds
            (neither begins nor reaches a :func:`~.pause_points.pause_point`: a forward pass or
            a layer begun) fails the health check (:class:`EngineStalled`); None: an engine call
            at work always passes it.
        priority: the engine thread's CPU priority
            (:data:`~dialscore_server.contract.options.CpuPriority`).
        gate: how requests and engine calls meet the gate of the engine's device on this node
            (:class:`~dialscore_server.scheduling.device_gate.GatedCalls`: an interactive
            request holds it while it is here, from admission to its last chunk's outcome; a
            yielding serving's calls wait for it to clear, and its lanes hold ``bulk_max_batch``
            for ``bulk_max_batch_hold_s`` after interactive work left the device); None: no
            gate (in-process servings).
        clock: what times the engine call at work and its progress (monotonic seconds; tests
            pass one they advance).

    :attr:`runner` is the runner built by `runner` (a
    :class:`~dialscore_server.scheduling.lanes.LaneQueue` unless a test passes its own).

    Metrics are recorded here, where they are measured: each engine call's batch figures
    (``dialscore_batch_*``, padding, reused tokens) and the work ledger's."""

    def __init__(self, run: Run[C, V], *, model: str, unit: str,
                 runner: RunnerFactory = one_at_a_time, lanes: LanePolicy = LanePolicy(),
                 rechunk: Rechunk[C] | None = None, stall_s: float | None = None,
                 priority: CpuPriority = "normal", gate: GatedCalls | None = None,
                 clock: Callable[[], float] = time.monotonic):
        self._run = run
        self._gate = gate
        self.stall_s = stall_s
        self.model = model
        self.lanes = lanes
        self._rechunk = rechunk
        self.ledger = WorkLedger(model, unit)
        self.arrivals = Arrivals()
        self._engine_thread: EngineThread[C, list[Outcome[V]]] = EngineThread(
            self.call, clock, priority)
        seen = gate.interactive_seen_at if gate is not None else None  # None unless it yields
        self.runner = runner(self._engine_thread.call, policy=lanes, model=model, unit=unit,
                             interactive_seen=seen)

    @property
    def gate(self) -> GatedCalls | None:
        """How this serving's engine calls meet its device's gate (None: no gate, as in a batch
        job's worker or in-process)."""
        return self._gate

    async def check_health(self, probe: Callable[[], None]) -> None:
        """Serve's health check of the replica's engine. While an engine call runs or waits for
        the engine thread, and the last call to finish returned, the engine is at work and that
        is the check: `probe` does not run, and the check passes unless the call now running
        has shown no progress (:attr:`EngineThread.since_progress_s`) for more than `stall_s`
        seconds, which raises :class:`EngineStalled` (a hung device or a deadlock: without this,
        a call that never returns would read as healthy forever). A long call that keeps
        reaching its pause points (a large bulk call, or one computing on the CPU time an
        ``idle`` priority leaves it) passes. Otherwise `probe` (the engine's tiny real forward
        pass) runs on the engine thread
        (:class:`~dialscore_server.scheduling.engine_thread.EngineThread`), never beside an engine
        call, and what it raises fails the check; after a failed call it waits behind the calls
        submitted before it."""
        thread = self._engine_thread
        if thread.busy and thread.failed is None:
            still = thread.since_progress_s
            if self.stall_s is not None and still is not None and still > self.stall_s:
                raise EngineStalled(
                    f"{self.model}: an engine call has shown no progress for {still:.0f} s (at "
                    f"work for {thread.at_work_s or still:.0f} s), beyond engine_stall_s "
                    f"({self.stall_s:g} s)")
            return
        await thread.submit(probe)

    def call(self, chunks: Sequence[C]) -> list[Outcome[V]]:
        """One accounted engine call for `chunks`, on the calling thread (the runner calls it on
        the engine thread): one outcome per chunk, in order. A yielding serving waits for its
        gate before the call and at the call's pause points (see `gate`); the waits are not
        engine time."""
        if self._gate is None:
            return self._accounted(chunks)
        with self._gate.call() as waited:
            outcomes = self._accounted(chunks)
        if waited.seconds:
            metrics.ENGINE_YIELD_SECONDS.labels(self.model).inc(waited.seconds)
        return outcomes

    def _accounted(self, chunks: Sequence[C]) -> list[Outcome[V]]:
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
            if report.cache_hits or report.cache_misses:
                self._record_cache(report)
        return [Outcome(v, seconds) for v in values]

    def _record_cache(self, report: BatchReport) -> None:
        """The context cache's part of an engine call's report, in the cache metrics."""
        metrics.CONTEXT_CACHE_LOOKUPS.labels(self.model, "hit").inc(report.cache_hits)
        metrics.CONTEXT_CACHE_LOOKUPS.labels(self.model, "miss").inc(report.cache_misses)
        metrics.CONTEXT_CACHE_TOKENS.labels(self.model).inc(report.cached_tokens)
        metrics.CONTEXT_CACHE_EVICTIONS.labels(self.model).inc(report.cache_evictions)
        metrics.CONTEXT_CACHE_BYTES.labels(self.model).set(report.cache_bytes)

    def _in_lane(self, chunks: list[C], lane: Lane) -> list[C]:
        """`chunks` as `lane` serves them, each marked with it: a bulk request's chunks cut to at
        most ``bulk_max_batch`` where lanes are on, the bound is set and the serving can cut
        them (see `rechunk`)."""
        cap = self.lanes.bulk_max_batch
        if (lane == "bulk" and self.lanes.enabled and cap is not None
                and self._rechunk is not None and any(c.size > cap for c in chunks)):
            chunks = self._rechunk(chunks, cap)
        for chunk in chunks:
            chunk.lane = lane
        return chunks

    async def serve(self, admit: Callable[[], list[C]], lane: Lane = "interactive"
                    ) -> Reply[list[V]]:
        """The whole path of one request that asked for `lane`: ``admit()`` off the event loop
        (its InputError is the reply's error), then its chunks in turn, in the lane
        :meth:`LanePolicy.lane_of <dialscore_server.scheduling.lanes.LanePolicy.lane_of>` gives
        it for its cost; the values of its chunks in order, and that lane. A request that asked
        for the interactive lane holds the device gate (see `gate`) throughout, or until its cost
        puts it in the bulk lane. Cancelling the caller drops what is left. ``tokenize_s`` is
        admission's time; ``queue_s`` includes the wait for requests admitted alongside
        (:mod:`~dialscore_server.scheduling.arrivals`)."""
        begun = time.perf_counter()
        with contextlib.ExitStack() as holding:
            if lane == "interactive" and self._gate is not None:
                holding.enter_context(self._gate.request())
            try:
                chunks, admit_s, waited = await self.arrivals.admit(admit)
            except InputError as exc:
                return Reply(error=exc)
            served = self.lanes.lane_of(lane, sum(c.cost for c in chunks))
            if served != "interactive":
                holding.close()
            chunks = self._in_lane(chunks, served)
            try:
                turns = await take_turns(chunks, self.runner, self.ledger)
            except ServiceError as exc:
                return Reply(error=exc, lane=served)
        metrics.LANE_LATENCY.labels(self.model, served).observe(time.perf_counter() - begun)
        return Reply(value=turns.values, compute_s=turns.compute_s, queue_s=turns.queue_s + waited,
                     tokenize_s=admit_s, lane=served)
