"""The NLL endpoint's work on one replica, without Ray: admit a request (validate and tokenize
it), cut it into chunks of about ``chunk_tokens`` computed positions, run merged chunks of many
requests through the engine in one call, put each request's answer back together.

Fair sharing and no orphan work as :mod:`dialscore_server.scheduling.chunks` describes: a request has
at most one chunk running and one queued, so a small request waits for about one chunk of a large
one; a cancelled request's chunks not yet computed are dropped and its running chunk stops at the
engine's next pass or layer (:mod:`dialscore_server.scheduling.cancellation`). A chunk is consecutive items
(never a part of one); a cut is placed between items with different sources where one is near,
so items sharing a context stay in one engine call and keep their prefix reuse.

The Serve deployment (deployment.py) wraps this with ``@serve.batch``; tests run it in-process
over a fake engine. Answers are :class:`~dialscore_server.contract.reply.Reply` objects.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from dialscore.model_card import ModelCard
from dialscore_server.scheduling.arrivals import Arrivals
from dialscore_server.scheduling.planner import BatchStats
from dialscore_server.contract.engine import Engine
from dialscore_server.contract.errors import InputError
from dialscore_server.contract.reply import Reply
from dialscore_server.scheduling.chunks import (
    Chunk, EngineThread, WorkLedger, abandoned_reply, run_in_turn,
)
from dialscore_server.scheduling.cancellation import CallGuard
from dialscore_server.nll.completions.choices import Completed, build_choice
from dialscore_server.nll.engine.encoding import EncodedItem, NLLItem
from dialscore_server.nll.engine.engine import NLLResult


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


#: Default chunk size in tokens (ServingOptions.chunk_tokens).
CHUNK_TOKENS = 2048


@dataclass
class Work(Chunk):
    """One chunk of an admitted request, already encoded: what waits for an engine call.
    `tokens`: the items' tokens (sources and targets, what the request's ``usage`` counts; at
    least 1), its cost in the work ledger. `positions`: about how many positions the engine
    computes for it (a source repeated by consecutive items counted once, see
    ``NLLEngine.positions``; at least 1, at most the replica's max_batch_tokens), what Serve
    sizes batches by."""

    encoded: list[EncodedItem]
    tokens: int
    positions: int

    @property
    def cost(self) -> int:
        return self.tokens


#: What an item costs a chunk, given the item before it in the chunk (None for the first):
#: ``NLLEngine.positions``.
Positions = Callable[[EncodedItem, "EncodedItem | None"], int]


def item_tokens(item: EncodedItem, after: EncodedItem | None = None) -> int:
    """An item's cost when nothing is shared: its tokens."""
    return item.cost


def chunk_items(encoded: Sequence[EncodedItem], chunk_tokens: int,
                positions: Positions = item_tokens) -> list[list[EncodedItem]]:
    """Cut `encoded` into runs of consecutive items costing at most `chunk_tokens` in all, where
    ``positions(item, previous item of the run)`` is an item's cost (default: its tokens; the
    engine's counts a source repeated by consecutive items once). An item costing more than that
    alone is a run of its own; no items, no runs; every item is in exactly one run, in order.
    Within the last quarter of a run's budget the cut moves back to the last change of source, so
    that a context's items stay together unless their group alone is large."""
    return [run for run, _ in costed_chunks(encoded, chunk_tokens, positions)]


def costed_chunks(encoded: Sequence[EncodedItem], chunk_tokens: int,
                  positions: Positions = item_tokens) -> list[tuple[list[EncodedItem], int]]:
    """The runs of :func:`chunk_items`, each with its cost (the sum of its items' `positions`,
    the first item of a run counted with no predecessor)."""
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


#: How requests meet the engine: a coroutine taking the works of one or more requests (a
#: ``@serve.batch`` method in a replica) and answering one reply per work, in order.
Runner = Callable[[Work], Awaitable[Reply[Scored]]]


class NLLServing:
    """Scores requests on one engine, in chunks of about `chunk_tokens` computed positions
    (``engine.positions``: a source repeated by consecutive items counted once; capped at
    `max_batch_tokens`, the most one engine call merges). Engine time follows computed
    positions, so chunks of equal positions take about equal time whatever the items share;
    counted in item tokens, a probe's chunk (explanations after one long context) would hold a
    third of what it computes in that time, and cut each context's items into more engine calls.
    `model` labels the metrics."""

    def __init__(self, engine: NLLScorer, max_batch_tokens: int, chunk_tokens: int = CHUNK_TOKENS,
                 model: str = ""):
        self.engine = engine
        self.max_batch_tokens = max_batch_tokens
        self.chunk_tokens = max(1, min(chunk_tokens, max_batch_tokens))
        self._card = engine.card()
        self.ledger = WorkLedger(model or self._card.name, "tokens")
        #: Runs the engine calls (``engine_thread.call`` is what ``@serve.batch`` awaits);
        #: without ``@serve.batch``, ``engine_thread.run_alone`` runs one chunk per call.
        self.engine_thread: EngineThread[Work, Scored] = EngineThread(self.run)
        #: Requests tokenized at the same time enter the batch queue together (arrivals.py).
        self.arrivals = Arrivals()

    def card(self) -> ModelCard:
        return self._card

    def check_health(self) -> None:
        self.engine.check_health()

    def admit(self, items: Sequence[NLLItem]) -> list[Work]:
        """Tokenize and validate every item (an InputError names ``items[i]...``) and cut the
        request into chunks (see :func:`chunk_items`)."""
        encoded = []
        for i, item in enumerate(items):
            try:
                encoded.append(self.engine.encode(item))
            except InputError as exc:
                raise exc.within(f"items[{i}]") from None
        return self._chunks(encoded)

    def _chunks(self, encoded: Sequence[EncodedItem]) -> list[Work]:
        """`encoded` as the chunks of one request (see :func:`chunk_items`)."""
        return [Work(run, tokens=max(1, sum(e.cost for e in run)),
                     positions=max(1, min(computed, self.max_batch_tokens)))
                for run, computed in costed_chunks(encoded, self.chunk_tokens,
                                                   self.engine.positions)]

    def run(self, works: Sequence[Work]) -> list[Reply[Scored]]:
        """One engine call for every item of `works`; one reply per work, in order. The first
        reply carries the call's statistics (so each call is counted once). The engine stops
        computing the items of a work cancelled while the call runs; such a work (nobody waits
        for it) gets an error reply."""
        flat = [e for w in works for e in w.encoded]
        owners = [[k] for k, w in enumerate(works) for _ in w.encoded]
        got = self.ledger.call(
            works, lambda guard: self.engine.score_encoded(flat, guard.over(owners)))
        if got is None:
            return [abandoned_reply() for _ in works]
        (results, stats), compute = got
        replies: list[Reply[Scored]] = []
        pos, reported = 0, False
        for w in works:
            mine = results[pos:pos + len(w.encoded)]
            pos += len(w.encoded)
            if w.cancelled and any(r is None for r in mine):
                replies.append(abandoned_reply())
                continue
            replies.append(Reply(value=Scored(mine),  # type: ignore[arg-type]
                                 batches=[] if reported else [(stats, len(works))],
                                 batch_requests=len(works), compute_s=compute))
            reported = True
        return replies

    async def score(self, items: Sequence[NLLItem], return_tokens: bool = False,
                    runner: Runner | None = None) -> Reply[Scored]:
        """The whole path of one request: admit it (off the event loop: tokenizing is CPU work;
        then wait for requests being tokenized alongside, see :mod:`dialscore_server.scheduling.arrivals`),
        hand its chunks to `runner` (default: one chunk per engine call) in turn, join the
        answers, add token strings when asked. Cancelling the caller drops what is left. The
        reply's `queue_s` includes the wait for requests tokenized alongside."""
        try:
            works, tokenize_s, waited = await self.arrivals.admit(lambda: self.admit(items))
        except InputError as exc:
            return Reply(error=exc)
        got = await run_in_turn(works, runner or self.engine_thread.run_alone, self.ledger)
        if got.error is not None:
            return got.error
        value = Scored([r for scored in got.values for r in scored.results])
        if return_tokens:
            value.tokens = [self.engine.token_strings(r.token_ids) for r in value.results]
        return Reply(value=value, batches=got.batches, batch_requests=got.batch_requests,
                     compute_s=got.compute_s, queue_s=got.queue_s + waited, tokenize_s=tokenize_s)

    async def complete(self, prompts: Sequence[str | Sequence[int]], params: Sequence[str], *,
                       echo: bool, generate: bool, logprobs: int | None,
                       runner: Runner | None = None) -> Reply[Completed]:
        """POST /v1/completions on this engine (:mod:`dialscore_server.nll.completions.choices`): every
        prompt becomes an item scored on the same path as /v1/nll items (admission, `runner`, so
        the same batches, token budget and prefix reuse); `params` name each prompt in errors.
        A one-token prompt with nothing generated has no position to score and skips the engine.
        """
        top_k = max(logprobs or 0, 1)  # the greedy token and echo's top_logprobs need >= 1

        def admit() -> list[EncodedItem]:
            out = []
            for prompt, param in zip(prompts, params):
                try:
                    out.append(self.engine.encode_prompt(prompt, generate, top_k))
                except InputError as exc:
                    raise (exc if exc.param == "model" else exc.within(param)) from None
            return out

        try:
            encoded, tokenize_s, waited = await self.arrivals.admit(admit)
        except InputError as exc:
            return Reply(error=exc)
        todo = [e for e in encoded if e.target_ids]
        got = await run_in_turn(self._chunks(todo), runner or self.engine_thread.run_alone,
                                self.ledger)
        if got.error is not None:
            return Reply(error=got.error.error)
        scored = [r for part in got.values for r in part.results]
        results = iter(scored)
        choices = [
            build_choice(prompt, e, next(results) if e.target_ids else None, echo=echo,
                         generate=generate, logprobs=logprobs, decoder=self.engine)
            for prompt, e in zip(prompts, encoded)
        ]
        return Reply(value=Completed(choices, scored), batches=got.batches,
                     batch_requests=got.batch_requests, compute_s=got.compute_s,
                     queue_s=got.queue_s + waited, tokenize_s=tokenize_s)
