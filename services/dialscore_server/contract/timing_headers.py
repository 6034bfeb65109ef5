"""Timing headers of the scoring routes, in milliseconds as text-embeddings-inference sends them
under the same names: ``x-compute-time`` (engine time in the replica), ``x-queue-time`` (time the
request waited in the replica's batch queue) and ``x-tokenization-time`` (time spent tokenizing
before the request was queued). Integers, as TEI's are.

Every scoring route sends ``x-compute-time`` and ``x-queue-time``. ``x-tokenization-time`` is sent
where tokenizing is a step of its own: POST /v1/nll, and the rerank routes when an NLL model is
named (its items' tokenization). The contradiction detector tokenizes its pairs inside its engine
call, so on POST /v1/contradiction and a rerank without NLL model that time is part of
``x-compute-time`` and the header is absent rather than a misleading 0. A rerank's times add up
its detector chunks and its NLL call (which run at the same time, so the sum can exceed the
request's wall time).

:func:`set_reply_timing` also sends the lane the request was served in
(:data:`~dialscore_server.contract.priority.LANE_HEADER`), when a replica admitted it."""

from __future__ import annotations

from fastapi import Response

from dialscore_server.contract.priority import LANE_HEADER
from dialscore_server.contract.reply import Reply


def set_timing_headers(response: Response, compute_s: float, queue_s: float | None = None,
                       tokenize_s: float | None = None) -> None:
    """Write the timing headers (milliseconds, rounded) for times given in seconds; a header whose
    time is None is left out."""
    response.headers["x-compute-time"] = str(round(compute_s * 1000))
    if queue_s is not None:
        response.headers["x-queue-time"] = str(round(queue_s * 1000))
    if tokenize_s is not None:
        response.headers["x-tokenization-time"] = str(round(tokenize_s * 1000))


def set_reply_timing(response: Response, reply: Reply, tokenized: bool) -> None:
    """The timing headers of a model deployment's `reply` (`tokenized`: whether the request was
    tokenized before it was queued, so ``reply.tokenize_s`` is a measured time), and its lane."""
    if reply.lane is not None:
        response.headers[LANE_HEADER] = reply.lane
    set_timing_headers(response, reply.compute_s, reply.queue_s,
                       reply.tokenize_s if tokenized else None)
