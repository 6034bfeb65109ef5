"""One line of a batch file in, one line out: the OpenAI Batch API's line format as vLLM's
``run_batch`` reads and writes it.

Input line: ``{"custom_id": str, "method": "POST", "url": "/v1/nll", "body": {...}}``.
Output line::

    {"id": "batch-…", "custom_id": …, "line": 7,
     "response": {"status_code": 200, "request_id": "…", "body": {…}},
     "error": null}

``response.body`` is exactly what the service answers to the same request: the endpoint's
response, or the one error body ``{"error": {"type", "message", "param"}}`` with its status.
``error`` is null on a 200 and ``{"code": <error type>, "message": …}`` otherwise (vLLM puts a
message there only when no HTTP-level answer exists; here every failure carries both, so a reader
can filter on ``error`` alone). ``line`` is the 1-based input line the output answers (an
addition to the format: a line without a usable ``custom_id`` is still identified, and a resume
can tell the lines apart).

The checks made here are the ones the service has no route for: the line is a JSON object, its
``custom_id`` is a non-empty string not used by an earlier line, and ``method``, ``url`` and
``body`` are present. Everything else (unknown url: 404 ``not_found``; a method other than POST:
405; a body failing the endpoint's schema: 422 naming the field; an unknown model: 404
``unknown_model``) is answered by the service's own routes (:mod:`.scorer`).
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import Any

from dialscore_server.contract.errors import ServiceError

#: The routes a batch file may name (the scoring routes; the service's other routes answer 404).
BATCH_URLS: tuple[str, ...] = ("/v1/nll", "/v1/completions", "/v1/contradiction", "/v1/rerank")


@dataclass(frozen=True)
class Request:
    """An input line that passed the line checks: scored by the routes."""

    line: int
    custom_id: str
    method: str
    url: str
    body: Any

    def row(self) -> dict[str, Any]:
        """The line as a Ray Data row (strings and ints only: the body re-serialised)."""
        return {"line": self.line, "custom_id": self.custom_id, "method": self.method,
                "url": self.url, "body": json.dumps(self.body, ensure_ascii=False)}


@dataclass(frozen=True)
class Rejected:
    """An input line refused before any route saw it, with the error the output line carries."""

    line: int
    custom_id: str | None
    error: ServiceError


def parse_line(text: str, line: int, seen: set[str]) -> Request | Rejected:
    """Check one input line (1-based number `line`); `seen` holds the custom_ids of earlier lines
    and gains this one's. Errors are ``invalid_request`` (422) naming the field."""
    try:
        raw = json.loads(text)
    except ValueError as exc:
        return Rejected(line, None, ServiceError(
            "invalid_request", f"line {line} is not valid JSON: {exc}"))
    if not isinstance(raw, dict):
        return Rejected(line, None, ServiceError(
            "invalid_request", f"line {line} is not a JSON object"))
    custom_id = raw.get("custom_id")
    if not isinstance(custom_id, str) or not custom_id:
        return Rejected(line, None, ServiceError(
            "invalid_request", "custom_id: a non-empty string is required", param="custom_id"))
    if custom_id in seen:
        return Rejected(line, custom_id, ServiceError(
            "invalid_request", f"custom_id: {custom_id!r} is used by an earlier line; each "
            "request needs its own", param="custom_id"))
    seen.add(custom_id)
    for field in ("method", "url"):
        if not isinstance(raw.get(field), str):
            return Rejected(line, custom_id, ServiceError(
                "invalid_request", f"{field}: a string is required", param=field))
    if "body" not in raw:
        return Rejected(line, custom_id, ServiceError(
            "invalid_request", "body: field required", param="body"))
    return Request(line, custom_id, raw["method"].upper(), raw["url"], raw["body"])


def output_line(line: int, custom_id: str | None, status: int, body: Any) -> dict[str, Any]:
    """The output line answering input line `line` with the route's `status` and `body`."""
    error = None
    if status != 200:
        detail = body.get("error") if isinstance(body, dict) else None
        detail = detail if isinstance(detail, dict) else {}
        error = {"code": detail.get("type", "internal"), "message": detail.get("message", "")}
    return {"id": f"batch-{uuid.uuid4().hex}", "custom_id": custom_id, "line": line,
            "response": {"status_code": status, "request_id": uuid.uuid4().hex, "body": body},
            "error": error}


def rejected_line(rejected: Rejected) -> dict[str, Any]:
    """The output line of a line refused by :func:`parse_line`."""
    return output_line(rejected.line, rejected.custom_id, rejected.error.status,
                       rejected.error.body())
