"""The NLL endpoint's work on one replica, without Ray: admit a request (validate and tokenize
it), run merged requests through the engine in one call, split the answers.

The Serve deployment (deployment.py) wraps this with ``@serve.batch``; tests run it in-process
over a fake engine. Answers are :class:`~dialscore_server.contract.reply.Reply` objects.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from dialscore.model_card import ModelCard
from dialscore_server.batching import BatchStats
from dialscore_server.contract.engine import Engine
from dialscore_server.contract.errors import InputError
from dialscore_server.contract.reply import Reply
from dialscore_server.nll.completions import Completed, build_choice
from dialscore_server.nll.encoding import EncodedItem, NLLItem
from dialscore_server.nll.engine import NLLResult


class NLLScorer(Engine, Protocol):
    """What the endpoint needs of its engine besides the lifecycle (NLLEngine documents what
    each operation computes)."""

    def encode(self, item: NLLItem) -> EncodedItem: ...

    def score_encoded(self, encoded: Sequence[EncodedItem]) -> tuple[list[NLLResult], BatchStats]: ...

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


@dataclass
class Work:
    """One admitted request, already encoded: what waits for an engine call."""

    encoded: list[EncodedItem]
    tokens: int  # the request's tokens, capped at the replica's max_batch_tokens


#: How requests meet the engine: a coroutine taking the works of one or more requests (a
#: ``@serve.batch`` method in a replica) and answering one reply per work, in order.
Runner = Callable[[Work], Awaitable[Reply[Scored]]]


class NLLServing:
    """Scores requests on one engine. `max_batch_tokens` caps what one request counts towards a
    merged batch (a request larger than that runs alone)."""

    def __init__(self, engine: NLLScorer, max_batch_tokens: int):
        self.engine = engine
        self.max_batch_tokens = max_batch_tokens
        self._card = engine.card()

    def card(self) -> ModelCard:
        return self._card

    def check_health(self) -> None:
        self.engine.check_health()

    def admit(self, items: Sequence[NLLItem]) -> Work:
        """Tokenize and validate every item; an InputError names ``items[i]...``."""
        encoded = []
        for i, item in enumerate(items):
            try:
                encoded.append(self.engine.encode(item))
            except InputError as exc:
                raise exc.within(f"items[{i}]") from None
        return Work(encoded, min(sum(e.cost for e in encoded), self.max_batch_tokens))

    def run(self, works: Sequence[Work]) -> list[Reply[Scored]]:
        """One engine call for every item of `works`; one reply per work, in order. The first
        reply carries the call's statistics (so each call is counted once)."""
        flat = [e for w in works for e in w.encoded]
        start = time.perf_counter()
        results, stats = self.engine.score_encoded(flat)
        compute = time.perf_counter() - start
        replies, pos = [], 0
        for k, w in enumerate(works):
            n = len(w.encoded)
            replies.append(Reply(value=Scored(results[pos:pos + n]), batch=stats if k == 0 else None,
                                 batch_requests=len(works), compute_s=compute))
            pos += n
        return replies

    async def run_alone(self, work: Work) -> Reply[Scored]:
        """:meth:`run` for one work, off the event loop (no batching)."""
        return (await asyncio.to_thread(self.run, [work]))[0]

    async def score(self, items: Sequence[NLLItem], return_tokens: bool = False,
                    runner: Runner | None = None) -> Reply[Scored]:
        """The whole path of one request: admit it (off the event loop: tokenizing is CPU work),
        hand it to `runner` (default :meth:`run_alone`), add token strings when asked."""
        started = time.perf_counter()
        try:
            work = await asyncio.to_thread(self.admit, items)
        except InputError as exc:
            return Reply(error=exc)
        enqueued = time.perf_counter()
        reply = await (runner or self.run_alone)(work)
        reply.queue_s = max(0.0, time.perf_counter() - enqueued - reply.compute_s)
        reply.tokenize_s = enqueued - started
        if return_tokens and reply.value is not None:
            reply.value.tokens = [self.engine.token_strings(r.token_ids) for r in reply.value.results]
        return reply

    async def complete(self, prompts: Sequence[str | Sequence[int]], params: Sequence[str], *,
                       echo: bool, generate: bool, logprobs: int | None,
                       runner: Runner | None = None) -> Reply[Completed]:
        """POST /v1/completions on this engine (:mod:`dialscore_server.nll.completions`): every
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

        started = time.perf_counter()
        try:
            encoded = await asyncio.to_thread(admit)
        except InputError as exc:
            return Reply(error=exc)
        enqueued = time.perf_counter()
        todo = [e for e in encoded if e.target_ids]
        reply: Reply[Scored] = Reply(value=Scored([]))
        if todo:
            reply = await (runner or self.run_alone)(
                Work(todo, min(sum(e.cost for e in todo), self.max_batch_tokens)))
        if reply.value is None:
            return Reply(error=reply.error)
        results = iter(reply.value.results)
        choices = [
            build_choice(prompt, e, next(results) if e.target_ids else None, echo=echo,
                         generate=generate, logprobs=logprobs, decoder=self.engine)
            for prompt, e in zip(prompts, encoded)
        ]
        return Reply(value=Completed(choices, reply.value.results), batch=reply.batch,
                     batch_requests=reply.batch_requests, compute_s=reply.compute_s,
                     queue_s=max(0.0, time.perf_counter() - enqueued - reply.compute_s),
                     tokenize_s=enqueued - started)
