"""What a model deployment's method returns across the Ray hop: a value or an error, one shape.

Errors travel as data rather than as raised exceptions: Ray would wrap a raised exception in its
own task error (and log its traceback as a failure), while a bad request is an ordinary answer.
The caller (a router, the rerank serving) calls :meth:`Reply.unwrap`, which returns the value or
raises the :class:`~dialscore_server.contract.errors.ServiceError` the replica put there.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeVar

from dialscore_server.contract.errors import ServiceError
from dialscore_server.contract.priority import Lane

T = TypeVar("T")


@dataclass
class Reply(Generic[T]):
    """One request's answer from a model deployment.

    * ``value``: the result (None when ``error`` is set).
    * ``error``: why there is no result; pickled as a plain ServiceError.
    * ``compute_s``: the engine time of the calls that computed the request (summed over its
      chunks); ``queue_s``: the rest of its time in the replica after admission (waiting for an
      engine call); ``tokenize_s``: admission's time (validating and tokenizing the request),
      which the timing headers report where tokenizing is a step of its own.
    * ``lane``: the priority lane the replica served the request in
      (:mod:`~dialscore_server.contract.priority`); None when no replica admitted it.
    """

    value: T | None = None
    error: ServiceError | None = None
    queue_s: float = 0.0
    compute_s: float = 0.0
    tokenize_s: float = 0.0
    lane: Lane | None = None

    def unwrap(self) -> T:
        """The value, or raise the error."""
        if self.error is not None:
            raise self.error
        return self.value  # type: ignore[return-value]
