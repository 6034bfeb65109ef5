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
not_found                 404     no such route
internal                  500     a bug in the service
========================  ======  ==============================================================
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

ErrorType = Literal[
    "invalid_request", "unknown_model", "payload_too_large", "overloaded", "timeout",
    "model_error", "unauthorized", "not_found", "internal",
]

STATUS: dict[str, int] = {
    "invalid_request": 422,
    "unknown_model": 404,
    "payload_too_large": 413,
    "overloaded": 503,
    "timeout": 408,
    "model_error": 424,
    "unauthorized": 401,
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
    """An error with a type from the closed set; the gateway turns it into an ErrorResponse."""

    def __init__(self, type: ErrorType, message: str, param: str | None = None,
                 retry_after: float | None = None):
        super().__init__(message)
        self.type: ErrorType = type
        self.message = message
        self.param = param
        self.retry_after = retry_after

    @property
    def status(self) -> int:
        return STATUS[self.type]

    def as_data(self) -> dict:
        """The constructor's arguments as a plain dict: how a deployment hands the error back to
        the gateway across the process hop (``ServiceError(**data)`` rebuilds it there)."""
        return {"type": self.type, "message": self.message, "param": self.param,
                "retry_after": self.retry_after}

    def body(self) -> dict:
        return ErrorResponse(error=ErrorDetail(type=self.type, message=self.message,
                                               param=self.param)).model_dump()


def error_responses(*types: ErrorType) -> dict[int | str, dict]:
    """OpenAPI `responses=` entries for the given error types (documented statuses = real ones)."""
    out: dict[int | str, dict] = {}
    for t in types:
        out.setdefault(STATUS[t], {"model": ErrorResponse, "description": ""})
        desc = out[STATUS[t]]["description"]
        out[STATUS[t]]["description"] = f"{desc}, {t}" if desc else t
    return out
