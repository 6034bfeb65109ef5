"""Exceptions → the one error body, in one function per source of error (FastAPI, Ray, ours).

Shared by the gateway (gateway/app.py) and the batch runner (batch/), which must not import the
gateway: both send the same error body for the same bad request.
"""

from __future__ import annotations

import logging
import math
from http import HTTPStatus

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from dialscore_server.contract.errors import ServiceError

logger = logging.getLogger("dialscore.gateway")


def loc_to_param(loc: tuple) -> str | None:
    """pydantic's error location → a field path: ("body", "items", 3, "target") → items[3].target."""
    parts = [p for p in loc if p != "body"]
    out = ""
    for p in parts:
        if isinstance(p, int):
            out += f"[{p}]"
        elif str(p).startswith(("function-after", "function-before", "tagged-union", "union")):
            continue  # pydantic's validator/union steps are not fields
        else:
            out += f".{p}" if out else str(p)
    return out or None


def error_response(err: ServiceError) -> JSONResponse:
    headers = {"x-error-type": err.type}
    if err.retry_after is not None:
        headers["Retry-After"] = str(max(1, math.ceil(err.retry_after)))
    if err.type == "timeout":
        # The gateway's 408 follows the cancellation of the model call (contract/deadline.py), and
        # model replicas drop a cancelled request's remaining work: re-sending does not double it.
        headers["x-work-dropped"] = "true"
    return JSONResponse(err.body(), status_code=err.status, headers=headers)


def error_response_bytes(err: ServiceError) -> bytes:
    """:func:`error_response` as raw HTTP/1.1 bytes that also close the connection
    (``connection: close``), for code that answers on a socket rather than through ASGI (the
    embedded default's front door, gateway/front_door.py)."""
    response = error_response(err)
    head = b"".join(name + b": " + value + b"\r\n" for name, value in response.raw_headers)
    return (b"HTTP/1.1 %d %s\r\n%sconnection: close\r\n\r\n"
            % (response.status_code, HTTPStatus(response.status_code).phrase.encode(), head)
            + bytes(response.body))


def from_validation(exc: RequestValidationError) -> ServiceError:
    errors = exc.errors()
    first = errors[0] if errors else {"loc": (), "msg": "invalid request"}
    param = loc_to_param(tuple(first.get("loc", ())))
    if first.get("type") == "json_invalid":
        return ServiceError("invalid_request", f"request body is not valid JSON: {first.get('msg')}",
                            param=None)
    msg = first.get("msg", "invalid value")
    more = f" (and {len(errors) - 1} more problem(s))" if len(errors) > 1 else ""
    return ServiceError("invalid_request", f"{param or 'body'}: {msg}{more}", param=param)


def install(app) -> None:
    """Register the handlers that make every error leave in the one shape."""

    @app.exception_handler(ServiceError)
    async def _service(_req: Request, exc: ServiceError):
        return error_response(exc)

    @app.exception_handler(RequestValidationError)
    async def _validation(_req: Request, exc: RequestValidationError):
        return error_response(from_validation(exc))

    @app.exception_handler(StarletteHTTPException)
    async def _http(_req: Request, exc: StarletteHTTPException):
        if exc.status_code == 404:
            return error_response(ServiceError("not_found", "no such route"))
        if exc.status_code == 405:
            # The one status outside the table: HTTP requires 405 (with `Allow`) for a known path
            # and a wrong method; the body is an ordinary invalid_request.
            return JSONResponse(ServiceError("invalid_request", str(exc.detail)).body(), status_code=405,
                                headers={**(exc.headers or {}), "x-error-type": "invalid_request"})
        return error_response(ServiceError("invalid_request", str(exc.detail)))

    @app.exception_handler(Exception)
    async def _unexpected(_req: Request, exc: Exception):
        logger.exception("unhandled error", exc_info=exc)
        return internal_error_response()


def internal_error_response() -> JSONResponse:
    """The answer to a bug: 500 ``internal`` in the one error shape (the details go to the log)."""
    return error_response(ServiceError("internal", "internal error; it has been logged"))
