"""How chunks meet the engine: a runner takes one chunk and answers its :class:`Outcome`, merging
chunks that wait at the same time into one engine call as it sees fit.

A serving is given a :data:`RunnerFactory` once, at construction, and builds its runner from its
own engine call: :func:`one_at_a_time` in-process (each chunk its own call, in turn), or
:func:`serve_batch` in a Serve replica (Ray Serve's ``@serve.batch`` merges the chunks waiting in
the replica's queue up to a budget counted in :attr:`Chunk.size <.chunks.Chunk.size>`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from dialscore_server.scheduling.chunks import Chunk

C = TypeVar("C", bound=Chunk)
V = TypeVar("V")


@dataclass
class Outcome(Generic[V]):
    """One chunk's answer from an engine call: its `value`, None when the chunk was cancelled
    while the call ran and was not computed to the end (nobody reads it); `compute_s`: the
    duration of the engine call that computed it."""

    value: V | None
    compute_s: float


#: One engine call for a batch of chunks: one outcome per chunk, in order.
EngineCall = Callable[[Sequence[C]], Awaitable[list[Outcome[V]]]]
#: A chunk in, its outcome out (the engine call that computes it may merge other chunks).
Runner = Callable[[C], Awaitable[Outcome[V]]]
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
