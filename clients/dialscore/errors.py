"""The client's exceptions, mirroring the server's closed set of error types (services/dialscore_server/contract/errors.py).

Our exception hierarchy::

    DialscoreError
    ├── APIConnectionError ........... no usable answer: connect failed, connection dropped (after retries)
    │   └── APITimeoutError .......... the client's own timeout fired (httpx.TimeoutException)
    ├── ResponseValidationError ...... a 2xx answer whose body does not match the expected schema
    ├── RetryBudgetExhaustedError .... a retryable failure not retried: the shared retry budget is spent
    └── APIStatusError ............... the server answered with an error status
        ├── InvalidRequestError ...... 422 invalid_request   (never retried; `param` names the field)
        ├── AuthenticationError ...... 401 unauthorized
        ├── HostNotAllowedError ...... 403 host_not_allowed (the Host header names no allowed host)
        ├── NotFoundError ............ 404 not_found
        │   └── UnknownModelError .... 404 unknown_model
        ├── PayloadTooLargeError ..... 413 payload_too_large
        ├── RetryableError ........... retried with backoff; raised when the retries are spent
        │   ├── RequestTimeoutError .. 408 timeout
        │   ├── RateLimitError ....... 429 (a proxy or rate limiter in front of the service)
        │   ├── ModelError ........... 424 model_error
        │   └── OverloadedError ...... 503 overloaded        (`retry_after` from the Retry-After header)
        └── InternalServerError ...... 500 internal, and any other 5xx that is not retryable

Every exception carries ``request`` (the :class:`httpx.Request` last sent), ``response`` (the
:class:`httpx.Response`, or ``None`` when none came back), ``param`` (the request field at fault,
from the error body, or ``None``) and ``attempts`` (how many times the request was sent).

A response is mapped by the ``error.type`` of its body first (the server's contract:
``{"error": {"type", "message", "param"}}``) and by its status code when the body is not in that
shape (e.g. an HTML page from a proxy): 502 and 504 then become a plain :class:`RetryableError`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # annotations only: the command line imports these classes without httpx
    import httpx


class DialscoreError(Exception):
    """Base of every exception the client raises."""

    def __init__(self, message: str, *, request: httpx.Request | None = None,
                 response: httpx.Response | None = None, param: str | None = None,
                 attempts: int = 1):
        super().__init__(message)
        self.message = message
        self.request = request
        self.response = response
        self.param = param
        self.attempts = attempts


class APIConnectionError(DialscoreError):
    """The request got no answer: the connection failed or dropped (after the retries)."""


class APITimeoutError(APIConnectionError):
    """The client's own timeout fired (connect, read, write or pool), after the retries."""


class ResponseValidationError(DialscoreError):
    """A success status whose body does not parse into the expected result model."""


class APIStatusError(DialscoreError):
    """The server answered with an error status. `type` is the server's error type (or None)."""

    #: The server's error type this class stands for (None for status-only classes).
    error_type: str | None = None
    #: Whether the client retries it (with backoff, honouring Retry-After).
    retryable: bool = False

    def __init__(self, message: str, *, request: httpx.Request | None = None,
                 response: httpx.Response | None = None, param: str | None = None,
                 attempts: int = 1, type: str | None = None, retry_after: float | None = None):
        super().__init__(message, request=request, response=response, param=param,
                         attempts=attempts)
        self.type = type
        self.retry_after = retry_after

    @property
    def status_code(self) -> int | None:
        return self.response.status_code if self.response is not None else None

    def __str__(self) -> str:
        where = f" (param: {self.param})" if self.param else ""
        return f"{self.status_code} {self.type or 'error'}: {self.message}{where}"


class InvalidRequestError(APIStatusError):
    error_type = "invalid_request"


class AuthenticationError(APIStatusError):
    error_type = "unauthorized"


class HostNotAllowedError(APIStatusError):
    """The service refused the ``Host`` this client sent (taken from its base URL): a local
    service with auth off accepts loopback names and addresses and the hosts it was started with
    (``--allowed-hosts``, ``DIALSCORE_ALLOWED_HOSTS``)."""

    error_type = "host_not_allowed"


class NotFoundError(APIStatusError):
    error_type = "not_found"


class UnknownModelError(NotFoundError):
    error_type = "unknown_model"


class PayloadTooLargeError(APIStatusError):
    error_type = "payload_too_large"


class RetryableError(APIStatusError):
    retryable = True


class RequestTimeoutError(RetryableError):
    error_type = "timeout"


class RateLimitError(RetryableError):
    error_type = "rate_limited"


class ModelError(RetryableError):
    error_type = "model_error"


class OverloadedError(RetryableError):
    error_type = "overloaded"


class InternalServerError(APIStatusError):
    error_type = "internal"


#: The server's error types (dialscore_server.contract.errors.ErrorType) and the class each becomes.
BY_TYPE: dict[str, type[APIStatusError]] = {
    cls.error_type: cls
    for cls in (InvalidRequestError, AuthenticationError, HostNotAllowedError, NotFoundError,
                UnknownModelError, PayloadTooLargeError, RequestTimeoutError, RateLimitError,
                ModelError, OverloadedError, InternalServerError)
}

#: Fallback by status when the body carries no known error type.
BY_STATUS: dict[int, type[APIStatusError]] = {
    401: AuthenticationError, 403: HostNotAllowedError, 404: NotFoundError,
    408: RequestTimeoutError, 413: PayloadTooLargeError, 422: InvalidRequestError, 424: ModelError,
    429: RateLimitError, 500: InternalServerError, 502: RetryableError, 503: OverloadedError,
    504: RetryableError,
}


def error_class(status: int, type: str | None) -> type[APIStatusError]:
    """The exception class for a response: by error type first, then by status code."""
    if type in BY_TYPE:
        return BY_TYPE[type]
    if status in BY_STATUS:
        return BY_STATUS[status]
    return InternalServerError if status >= 500 else APIStatusError


class RetryBudgetExhaustedError(DialscoreError):
    """A retryable failure was not retried because the client's retry budget
    (:class:`~dialscore.retry_budget.RetryBudget`, shared across calls) is spent: most recent
    calls failed. ``__cause__`` is the error of the last attempt. Stop and resume later (probe and
    evaluation runs resume from their run directory)."""

