"""Reading the service's responses: a success parsed into its typed result
(:mod:`dialscore.types`), a failure into the exception of :mod:`dialscore.errors` its status and
error body name, and the answers of the health and limits routes.

Every function here is pure: it reads a response the client already has and sends nothing.
"""

from __future__ import annotations

import logging
from typing import TypeVar

import httpx
from pydantic import BaseModel, ValidationError

from dialscore.errors import APIStatusError, ResponseValidationError, error_class
from dialscore.retry_policy import parse_retry_after
from dialscore.types import Health, NLLDialoguesResponse, NLLResponse, PublishedLimits

__all__ = ["check_count", "check_dialogues", "health", "limits", "parse", "status_error"]

log = logging.getLogger("dialscore.client")

R = TypeVar("R", bound=BaseModel)


def status_error(response: httpx.Response, attempt: int) -> APIStatusError:
    """The exception for a failed `response` to attempt number `attempt`: its class from the
    status and the service's error ``type``; its message and ``param`` from the service's error
    body (``{"error": {"type", "message", "param"}}``), or the first 300 characters of any other
    body (a proxy's plain text); its ``retry_after`` from a ``Retry-After`` header."""
    type_, message, param = None, None, None
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        err = body["error"]
        type_ = err.get("type") if isinstance(err.get("type"), str) else None
        message = err.get("message") if isinstance(err.get("message"), str) else None
        param = err.get("param") if isinstance(err.get("param"), str) else None
    if message is None:
        text = response.text.strip()
        message = (text[:300] or response.reason_phrase or "error")
    cls = error_class(response.status_code, type_)
    return cls(message, request=response.request, response=response, param=param,
               attempts=attempt, type=type_ or cls.error_type,
               retry_after=parse_retry_after(response.headers.get("Retry-After")))


def parse(response: httpx.Response, cls: type[R], attempt: int) -> R:
    """`response`'s body as a `cls`; its :func:`status_error` when it failed, a
    :class:`~dialscore.errors.ResponseValidationError` when its body is not a `cls`."""
    if not response.is_success:
        raise status_error(response, attempt)
    try:
        return cls.model_validate(response.json())
    except (ValueError, ValidationError) as exc:
        raise ResponseValidationError(
            f"{response.request.method} {response.request.url.path}: the response does not "
            f"parse as {cls.__name__}: {exc}", request=response.request, response=response,
            attempts=attempt) from exc


def check_count(response: NLLResponse, n: int, request: httpx.Request | None) -> NLLResponse:
    """`response`, which answers `n` items, or a ResponseValidationError when it has not `n`
    results."""
    if len(response.results) != n:
        raise ResponseValidationError(
            f"sent {n} items, got {len(response.results)} results", request=request)
    return response


def check_dialogues(response: NLLDialoguesResponse, n: int) -> NLLDialoguesResponse:
    """`response`, which answers `n` dialogues, or a ResponseValidationError when it has not
    `n` results."""
    if len(response.results) != n:
        raise ResponseValidationError(
            f"sent {n} dialogues, got {len(response.results)} results", request=None)
    return response


def health(live: httpx.Response, ready: httpx.Response) -> Health:
    """The service's health from its ``GET /healthz`` (`live`) and ``GET /readyz`` (`ready`)
    answers; the detail is ``/readyz``'s JSON body, or its text."""
    try:
        detail = ready.json()
    except ValueError:
        detail = ready.text or None
    return Health(alive=live.is_success, ready=ready.is_success, detail=detail)


def limits(response: httpx.Response, attempt: int) -> PublishedLimits | None:
    """The limits in a ``GET /openapi.json`` response; None when it has none to give (a 4xx,
    a body that is not JSON, no ``info["x-limits"]`` or one that does not parse). A 5xx raises
    its error: the server is in trouble, not silent about its limits."""
    if response.status_code >= 500:
        raise status_error(response, attempt)
    if not response.is_success:
        return None
    try:
        info = response.json().get("info") or {}
        return PublishedLimits.model_validate(info["x-limits"])
    except (ValueError, AttributeError, KeyError, TypeError, ValidationError) as exc:
        log.info("GET /openapi.json publishes no usable limits (%s: %s)", type(exc).__name__, exc)
        return None
