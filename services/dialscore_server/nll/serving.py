"""The NLL endpoint's work on one replica, without Ray: admit a request (validate and tokenize
it), cut it into chunks of about ``chunk_tokens`` computed positions, and run merged chunks of many
requests through the engine in one call (:mod:`dialscore_server.scheduling`); put each request's
answer back together. POST /v1/completions' prompts take the same path
(:mod:`dialscore_server.nll.completions.serving`).

A chunk is consecutive items (never a part of one); a cut is placed between items with different
sources where one is near, so items sharing a context stay in one engine call and keep their
prefix reuse. The Serve deployment (deployment.py) builds this with Serve's batching runner;
tests build it in-process over a fake engine.
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
from dialscore_server.contract.errors import InputError
from dialscore_server.contract.options import ServingOptions
from dialscore_server.contract.priority import Lane
from dialscore_server.contract.reply import Reply
from dialscore_server.nll.completions.serving import CompletionCall, Completed, build_choice
from dialscore_server.nll.engine.encoding import EncodedItem, NLLItem
from dialscore_server.nll.engine.engine import NLLResult
from dialscore_server.nll.tokenizer.serving import TokenizerCall, run_tokenizer_call
from dialscore_server.scheduling.cancellation import CallGuard
from dialscore_server.scheduling.chunks import Chunk
from dialscore_server.scheduling.device_gate import DeviceGate, GatedCalls
from dialscore_server.contract.options import CpuPriority
from dialscore_server.scheduling.lanes import LanePolicy
from dialscore_server.scheduling.planner import BatchStats
from dialscore_server.scheduling.serving import (
    ChunkedServing, RunnerFactory, one_at_a_time, replica_schedule,
)

#: Default chunk size in computed positions (ServingOptions.chunk_tokens).
CHUNK_TOKENS = 2048


class NLLScorer(Engine, Protocol):
    """What the endpoint needs of its engine besides the lifecycle (NLLEngine documents what
    each operation computes)."""

    def encode(self, item: NLLItem) -> EncodedItem: ...

    def positions(self, item: EncodedItem, after: EncodedItem | None = None) -> int: ...

    def score_encoded(self, encoded: Sequence[EncodedItem], guard: CallGuard | None = None
                      ) -> tuple[list[NLLResult | None], BatchStats]: ...

    def token_strings(self, ids: Sequence[int]) -> list[str]: ...

    def encode_prompt(self, prompt: str | Sequence[int], append_next: bool, top_k: int
                      ) -> EncodedItem: ...

    def decode(self, ids: Sequence[int]) -> str: ...


@dataclass
class Scored:
    """The value of a score reply: results in item order, and each target's token strings when
    they were asked for."""

    results: list[NLLResult]
    tokens: list[list[str]] | None = None


class NLLService(Protocol):
    """A dialogue model as the routers and the rerank serving call it: in-process
    (:class:`NLLServing`) or over Ray Serve (:class:`~dialscore_server.nll.deployment.NLLHandle`)."""

    async def score(self, items: Sequence[NLLItem], return_tokens: bool = False,
                    lane: Lane = "interactive") -> Reply[Scored]:
        """Per-token NLLs of `items` (see :mod:`dialscore_server.nll.engine.engine`), in order;
        token strings too with `return_tokens`; asking for the priority `lane` (the reply says the
        lane used). Bad items are the reply's InputError, naming ``items[i]...``."""
        ...

    async def complete(self, call: CompletionCall, lane: Lane = "interactive"
                       ) -> Reply[Completed]:
        """POST /v1/completions' prompts (:mod:`dialscore_server.nll.completions.serving`), asking
        for the priority `lane`."""
        ...

    async def card(self) -> ModelCard:
        """The model's card."""
        ...

    async def tokenizer(self, call: TokenizerCall) -> Reply[object]:
        """GET /tokenizer_info, POST /tokenize or /detokenize on the model's own tokenizer
        (:mod:`dialscore_server.nll.tokenizer.serving`): a TokenizerInfo, token ids or a text."""
        ...


class NLLBackend(Backend, Protocol):
    """The ingress as the NLL routes (POST /v1/nll, /v1/completions) see it."""

    def nll(self, model: str) -> NLLService:
        """The served dialogue model `model` (a name :meth:`resolve` returned)."""
        ...


@dataclass
class Work(Chunk):
    """One chunk of an admitted request, already encoded: what waits for an engine call.
    `tokens`: the items' tokens (sources and targets, what the request's ``usage`` counts; at
    least 1), its cost in the work ledger. `positions`: about how many positions the engine
    computes for it (a source repeated by consecutive items counted once, and what the context
    cache held of each item when the request was admitted not counted, see
    ``NLLEngine.positions``; at least 1, at most the replica's max_batch_tokens), what an
    engine call's batch is sized by."""

    encoded: list[EncodedItem]
    tokens: int
    positions: int

    @property
    def cost(self) -> int:
        return self.tokens

    @property
    def size(self) -> int:
        return self.positions


#: What an item costs a chunk, given the item before it in the chunk (None for the first):
#: ``NLLEngine.positions``.
Positions = Callable[[EncodedItem, "EncodedItem | None"], int]


def item_tokens(item: EncodedItem, after: EncodedItem | None = None) -> int:
    """An item's cost when nothing is shared: its tokens."""
    return item.cost


def chunk_items(encoded: Sequence[EncodedItem], chunk_tokens: int,
                positions: Positions = item_tokens) -> list[tuple[list[EncodedItem], int]]:
    """Cut `encoded` into runs of consecutive items costing at most `chunk_tokens` in all, where
    ``positions(item, previous item of the run)`` is an item's cost (default: its tokens; the
    engine's counts a source repeated by consecutive items once); each run with its cost (the
    first item of a run counted with no predecessor). An item costing more than that alone is a
    run of its own; no items, no runs; every item is in exactly one run, in order. Within the
    last quarter of a run's budget the cut moves back to the last change of source, so that a
    context's items stay together unless their group alone is large."""
    runs: list[tuple[list[EncodedItem], int]] = []
    run: list[EncodedItem] = []
    sizes: list[int] = []  # each item's cost in `run`
    total = 0  # sum(sizes)
    for item in encoded:
        size = positions(item, run[-1] if run else None)
        if run and total + size > chunk_tokens:
            cut = len(run)
            for j in range(len(run) - 1, 0, -1):  # the last change of source, if near the end
                if run[j].source_ids != run[j - 1].source_ids:
                    if sum(sizes[:j]) >= chunk_tokens * 3 // 4:
                        cut = j
                    break
            if cut < len(run) and run[cut].source_ids != item.source_ids:
                cut = len(run)  # the tail does not share the next item's source anyway
            runs.append((run[:cut], sum(sizes[:cut])))
            run, sizes = run[cut:], sizes[cut:]
            if run:  # the tail's first item now heads a run: nothing before it is shared
                sizes[0] = positions(run[0], None)
            else:
                size = positions(item, None)
            total = sum(sizes)
        run.append(item)
        sizes.append(size)
        total += size
    if run:
        runs.append((run, total))
    return runs


#: Upper bound of `max_batch_tokens` (an engine call's budget, in computed positions).
MAX_BATCH_TOKENS = 16384


class NLLServing:
    """Scores requests on one engine, in chunks of about `chunk_tokens` computed positions
    (``engine.positions``: a source repeated by consecutive items counted once; capped at
    `max_batch_tokens`, the most one engine call merges). Engine time follows computed
    positions, so chunks of equal positions take about equal time whatever the items share.
    `model` labels the metrics (default: the card's name); `runner` is how chunks meet the
    engine (:mod:`dialscore_server.scheduling.serving`); `lanes` the priority-lane policy
    (default: lanes on, a request of more than one chunk's tokens served in the bulk lane);
    `stall_s` and `clock` the health check's bound on an engine call without progress
    (:meth:`check_health`); `priority` the engine thread's CPU priority; `gate` how its engine
    calls meet the device's gate (:class:`~dialscore_server.scheduling.device_gate.GatedCalls`;
    None: none)."""

    def __init__(self, engine: NLLScorer, *, max_batch_tokens: int,
                 chunk_tokens: int = CHUNK_TOKENS, model: str = "",
                 runner: RunnerFactory = one_at_a_time, lanes: LanePolicy | None = None,
                 stall_s: float | None = None, priority: CpuPriority = "normal",
                 gate: GatedCalls | None = None, clock: Callable[[], float] = time.monotonic):
        self.engine = engine
        self.max_batch_tokens = max_batch_tokens
        self.chunk_tokens = max(1, min(chunk_tokens, max_batch_tokens))
        self._card = engine.card()
        self.model = model or self._card.name
        self.chunks: ChunkedServing[Work, list[NLLResult]] = ChunkedServing(
            self.run, model=self.model, unit="tokens", runner=runner,
            lanes=lanes or LanePolicy(interactive_max_cost=self.chunk_tokens),
            rechunk=self.rechunk, stall_s=stall_s, priority=priority, gate=gate, clock=clock)

    @classmethod
    def from_options(cls, engine: NLLScorer, options: ServingOptions, model: str,
                     gate: DeviceGate | None = None) -> NLLServing:
        """The serving a model's replica runs (and a batch worker, the same): an engine call's
        budget of `options.max_batch_tokens` (at most :data:`MAX_BATCH_TOKENS`), chunks of
        `options.chunk_tokens`, scheduled by
        :func:`~dialscore_server.scheduling.serving.replica_schedule`."""
        budget = min(options.max_batch_tokens, MAX_BATCH_TOKENS)
        return cls(engine, max_batch_tokens=budget, chunk_tokens=options.chunk_tokens, model=model,
                   **replica_schedule(options, budget, options.chunk_tokens, gate))

    async def card(self) -> ModelCard:
        return self._card

    async def check_health(self) -> None:
        """The engine's health check, on the engine thread when it is idle; an engine call that
        shows no progress for longer than `stall_s` fails it (see
        :meth:`ChunkedServing.check_health <dialscore_server.scheduling.serving.ChunkedServing.check_health>`)."""
        await self.chunks.check_health(self.engine.check_health)

    async def tokenizer(self, call: TokenizerCall) -> Reply[object]:
        """See :meth:`NLLService.tokenizer`: run at once on the replica's event loop (no engine
        call, no queue); a bad id is the reply's InputError naming ``tokens``."""
        return run_tokenizer_call(self.engine, call)  # type: ignore[arg-type]

    def admit(self, items: Sequence[NLLItem]) -> list[Work]:
        """Tokenize and validate every item (an InputError names ``items[i]...``) and cut the
        request into chunks (see :func:`chunk_items`)."""
        encoded = []
        for i, item in enumerate(items):
            try:
                encoded.append(self.engine.encode(item))
            except InputError as exc:
                raise exc.within(f"items[{i}]") from None
        return self.cut_into_chunks(encoded)

    def cut_into_chunks(self, encoded: Sequence[EncodedItem], chunk_tokens: int | None = None
                        ) -> list[Work]:
        """`encoded` (one request's items, in order) as that request's chunks (see
        :func:`chunk_items`), of about `chunk_tokens` computed positions each (default:
        :attr:`chunk_tokens`), counted against the context cache as it is now."""
        return [Work(run, tokens=max(1, sum(e.cost for e in run)),
                     positions=max(1, min(computed, self.max_batch_tokens)))
                for run, computed in chunk_items(encoded, chunk_tokens or self.chunk_tokens,
                                                 self.engine.positions)]

    def rechunk(self, works: list[Work], positions: int) -> list[Work]:
        """One request's chunks `works` cut again into chunks of at most `positions` computed
        positions (whole items, in order; an item computing more is a chunk of its own): how a
        bulk request meets a ``bulk_max_batch`` smaller than :attr:`chunk_tokens`."""
        return self.cut_into_chunks([e for w in works for e in w.encoded], positions)

    def run(self, works: Sequence[Work], guard: CallGuard
             ) -> tuple[list[list[NLLResult] | None], BatchStats]:
        """One engine call for every item of `works`: each work's results, or None for a work
        whose items the guard left out (cancelled while the call ran)."""
        flat = [e for w in works for e in w.encoded]
        owners = [[k] for k, w in enumerate(works) for _ in w.encoded]
        results, stats = self.engine.score_encoded(flat, guard.over(owners))
        out: list[list[NLLResult] | None] = []
        pos = 0
        for w in works:
            mine = results[pos:pos + len(w.encoded)]
            pos += len(w.encoded)
            out.append(None if any(r is None for r in mine) else mine)  # type: ignore[misc]
        return out, stats

    def _count(self, results: Sequence[NLLResult]) -> None:
        metrics.ITEMS.labels(self.model).inc(len(results))
        metrics.TOKENS.labels(self.model, "source").inc(sum(r.source_tokens for r in results))
        metrics.TOKENS.labels(self.model, "target").inc(sum(r.num_tokens for r in results))

    async def score(self, items: Sequence[NLLItem], return_tokens: bool = False,
                    lane: Lane = "interactive") -> Reply[Scored]:
        """See :meth:`NLLService.score`. Cancelling the caller drops what is left."""
        reply = await self.chunks.serve(lambda: self.admit(items), lane)
        if reply.error is not None:
            return Reply(error=reply.error, lane=reply.lane)
        results = [r for part in reply.unwrap() for r in part]
        self._count(results)
        value = Scored(results)
        if return_tokens:
            value.tokens = [self.engine.token_strings(r.token_ids) for r in results]
        return Reply(value=value, compute_s=reply.compute_s, queue_s=reply.queue_s,
                     tokenize_s=reply.tokenize_s, lane=reply.lane)

    async def complete(self, call: CompletionCall, lane: Lane = "interactive"
                       ) -> Reply[Completed]:
        """See :meth:`NLLService.complete`: every prompt becomes an item scored on the same path
        as /v1/nll items (the same batches, token budget and prefix reuse). A one-token prompt
        with nothing generated has no position to score and skips the engine."""
        encoded: list[EncodedItem] = []

        def admit() -> list[Work]:
            encoded.extend(call.encode(self.engine))
            return self.cut_into_chunks([e for e in encoded if e.target_ids])

        reply = await self.chunks.serve(admit, lane)
        if reply.error is not None:
            return Reply(error=reply.error, lane=reply.lane)
        scored = [r for part in reply.unwrap() for r in part]
        self._count(scored)
        results = iter(scored)
        choices = [build_choice(prompt, e, next(results) if e.target_ids else None, call=call,
                                decoder=self.engine)
                   for prompt, e in zip(call.prompts, encoded)]
        return Reply(value=Completed(choices), compute_s=reply.compute_s, queue_s=reply.queue_s,
                     tokenize_s=reply.tokenize_s, lane=reply.lane)
