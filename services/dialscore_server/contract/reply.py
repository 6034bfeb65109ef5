"""What a model deployment's method returns across the Ray hop: a value or an error, one shape.

Errors travel as data rather than as raised exceptions: Ray would wrap a raised exception in its
own task error (and log its traceback as a failure), while a bad request is an ordinary answer.
The gateway (or the rerank deployment) calls :meth:`Reply.unwrap`, which returns the value or
raises the :class:`~dialscore_server.contract.errors.ServiceError` the replica put there.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

from dialscore_server.contract.errors import ServiceError

T = TypeVar("T")


class BatchReport(Protocol):
    """What one engine call reports for the metrics (the engines' batch statistics)."""

    items: int
    real_tokens: int

    @property
    def padding_waste(self) -> float: ...

    @property
    def reused_tokens(self) -> int: ...


@dataclass
class Reply(Generic[T]):
    """One request's answer from a model deployment.

    * ``value``: the result (None when ``error`` is set).
    * ``error``: why there is no result; pickled as a plain ServiceError.
    * ``batches``: the statistics of engine calls that computed the request, each with the
      number of requests it merged; a call's statistics come with exactly one of the requests
      (or chunks) it computed, so every call is counted once; ``batch_requests``: the most
      requests merged into one call that computed this request.
    * ``queue_s``: time the request waited in the replica before its engine call started;
      ``compute_s``: the engine call's duration; ``tokenize_s``: time spent tokenizing the request
      before it was queued, where that is a step of its own (0.0 where the engine tokenizes inside
      its call, as the contradiction detector does: then it is part of ``compute_s``).
    """

    value: T | None = None
    error: ServiceError | None = None
    batches: list[tuple[BatchReport, int]] = field(default_factory=list)
    batch_requests: int = 0
    queue_s: float = 0.0
    compute_s: float = 0.0
    tokenize_s: float = 0.0

    def unwrap(self) -> T:
        """The value, or raise the error."""
        if self.error is not None:
            raise self.error
        return self.value  # type: ignore[return-value]
