"""The error contract, in one place: a closed set of error types, each mapped to one HTTP status.

Every error response of every endpoint has the body ``{"error": {"type", "message", "param"}}``.
``param`` names the offending field in the request (``items[3].target``) or is null. Client input
never produces a 500: an unexpected exception is reported as ``internal`` and logged; the tests
treat any 500 as a bug.

========================  ======  ==============================================================
type                      status  when
========================  ======  ==============================================================
invalid_request           422     malformed JSON, wrong types, missing or invalid fields
unknown_model             404     `model` is not served by this deployment
payload_too_large         413     too many items/candidates/turns, or too many bytes
overloaded                503     the model's queue is full; `Retry-After` says when to retry
timeout                   408     the request did not finish within the server's deadline
model_error               424     the model replica failed or is unavailable (retryable)
unauthorized              401     bearer token missing or wrong (when auth is on)
host_not_allowed          403     the `Host` header is not loopback nor an allowed host (the
                                  embedded default with auth off; contract/host_check.py)
not_found                 404     no such route
internal                  500     a bug in the service
========================  ======  ==============================================================
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

ErrorType = Literal[
    "invalid_request", "unknown_model", "payload_too_large", "overloaded", "timeout",
    "model_error", "unauthorized", "host_not_allowed", "not_found", "internal",
]

STATUS: dict[str, int] = {
    "invalid_request": 422,
    "unknown_model": 404,
    "payload_too_large": 413,
    "overloaded": 503,
    "timeout": 408,
    "model_error": 424,
    "unauthorized": 401,
    "host_not_allowed": 403,
    "not_found": 404,
    "internal": 500,
}

#: Error types a client may retry (with backoff, honouring Retry-After).
RETRYABLE: frozenset[str] = frozenset({"overloaded", "timeout", "model_error"})


class ErrorDetail(BaseModel):
    type: ErrorType = Field(description="One of the closed set of error types.")
    message: str = Field(description="What went wrong, for a person.")
    param: str | None = Field(None, description="The request field at fault, e.g. `items[3].target`.")


class ErrorResponse(BaseModel):
    """The body of every error response."""

    error: ErrorDetail


class ServiceError(Exception):
    """An error with a type from the closed set; the gateway turns it into an ErrorResponse.

    This object is also the one wire shape of an error across the Ray hop: a deployment puts it
    in its :class:`~dialscore_server.contract.reply.Reply` and it is pickled as itself (type,
    message, param, retry_after), whatever the class that raised it.
    """

    def __init__(self, type: ErrorType, message: str, param: str | None = None,
                 retry_after: float | None = None):
        super().__init__(message)
        self.type: ErrorType = type
        self.message = message
        self.param = param
        self.retry_after = retry_after

    def __reduce__(self):
        # Crosses process boundaries as a plain ServiceError: the receiving side needs the four
        # fields, not the raising class (which may not even be importable there).
        return (ServiceError, (self.type, self.message, self.param, self.retry_after))

    def __repr__(self) -> str:
        return (f"ServiceError(type={self.type!r}, message={self.message!r}, param={self.param!r}, "
                f"retry_after={self.retry_after!r})")

    @property
    def status(self) -> int:
        return STATUS[self.type]

    def body(self) -> dict:
        return ErrorResponse(error=ErrorDetail(type=self.type, message=self.message,
                                               param=self.param)).model_dump()


class InputError(ServiceError, ValueError):
    """Input that cannot be served as given: ``invalid_request`` (422), `param` naming the field.

    The one input-error class: engines, pairing and the reranker raise it (or a subclass) with
    `param` relative to what they were given (``target``, ``turns[3].id``); each layer that wraps
    the input in a bigger request re-roots the path with :meth:`within`, so the caller sees the
    field of its own request (``items[7].target``). It is a ``ValueError`` too, so in-process
    callers of an engine can catch it as one.
    """

    def __init__(self, message: str, param: str | None = None):
        super().__init__("invalid_request", message, param)

    def within(self, prefix: str) -> "InputError":
        """The same error with `param` under `prefix`: ``target`` within ``items[3]`` is
        ``items[3].target``; ``[2]`` within ``turns`` is ``turns[2]``; no param gives `prefix`."""
        if not self.param:
            param = prefix
        elif self.param.startswith("["):
            param = prefix + self.param
        else:
            param = f"{prefix}.{self.param}"
        out = type(self).__new__(type(self))
        InputError.__init__(out, self.message, param)
        return out


#: The errors a route that scores on a model may answer: a bad request or one over the limits, a
#: model the deployment does not serve, the model's replicas overloaded, past the deadline, or
#: failing.
SCORING_ERRORS: tuple[ErrorType, ...] = ("invalid_request", "unknown_model", "payload_too_large",
                                         "overloaded", "timeout", "model_error")


def error_responses(*types: ErrorType) -> dict[int | str, dict]:
    """OpenAPI `responses=` entries for the given error types (documented statuses = real ones)."""
    out: dict[int | str, dict] = {}
    for t in types:
        out.setdefault(STATUS[t], {"model": ErrorResponse, "description": ""})
        desc = out[STATUS[t]]["description"]
        out[STATUS[t]]["description"] = f"{desc}, {t}" if desc else t
    return out
