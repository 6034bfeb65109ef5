"""Strict reading of JSON request bodies, before FastAPI and pydantic see them.

Every POST route uses :class:`StrictJSONRoute`. It refuses, with a 422 ``invalid_request`` that
says what is wrong (and names the field where there is one):

* a body that is not declared ``Content-Type: application/json`` (or ``+json``): text/plain,
  forms, multipart and a missing Content-Type. (``curl -d`` sends a form type by default: the
  message says which header to send.)
* a ``Content-Encoding`` other than identity (gzip, deflate...): bodies are not decompressed,
  so a declared encoding is refused rather than parsed as JSON garbage;
* an empty body, invalid UTF-8 and invalid JSON;
* what Python's ``json`` module accepts but RFC 8259 JSON is not, or cannot be answered safely:
  ``NaN``/``Infinity`` literals, numbers that overflow to infinity (``1e999``), integers of
  more than 4300 digits, duplicated keys in one object (a parser-differential hazard: proxies
  and servers disagree on which value wins), objects and arrays nested deeper than
  :data:`MAX_DEPTH` (the schemas nest at most 5 levels);
* a string anywhere in the body (a key, a model name, a speaker, a turn id) holding a lone
  UTF-16 surrogate (``"\\ud800"``): it cannot be encoded as UTF-8, so it could neither be
  tokenized nor echoed back in a response.

Before parsing, a counting pass over the raw bytes (C-speed regex and byte counts, no Python
objects per element) refuses with a 413 ``payload_too_large`` (param ``body``) a body of more than
``max_json_values`` JSON values, and with the 422 above one nested deeper than :data:`MAX_DEPTH`,
so the parser never builds a huge tree of small values (262,144 integers cost about 1 s and
300 MB to parse and walk).

The parsed body is handed to FastAPI unchanged (no second parse).
"""

from __future__ import annotations

import email.message
import json
import math
import re
from collections.abc import Callable, Coroutine
from itertools import accumulate
from typing import Any

from fastapi import Request, Response
from fastapi.routing import APIRoute

from dialscore_server.contract.errors import ServiceError
from dialscore_server.contract.limits import Limits

#: Deepest nesting of JSON arrays/objects accepted (the request schemas need 5).
MAX_DEPTH = 32

_SURROGATE = re.compile("[\ud800-\udfff]")
#: A JSON string token (the counting pass blanks strings so their contents are not counted).
#: Written as "unrolled loop" (runs of plain bytes between escapes) rather than an alternation
#: per byte: the same matches, with far fewer steps of the regex engine per string byte.
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
#: The only way a parsed body can hold a lone surrogate: a ``\uD800``-``\uDFFF`` escape (raw
#: UTF-8 bytes cannot encode one; strict decoding refuses them). Bodies without such an escape
#: skip the walk of the parsed tree (an escaped backslash before "ud8.." matches too: the walk
#: then runs, which is only slower).
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
_NOT_STRUCTURE = bytes(b for b in range(256) if b not in b"[]{},")


def check_shape(body: bytes, max_values: int | None, max_depth: int = MAX_DEPTH) -> None:
    """Count a raw body's JSON values and nesting before parsing it.

    Values are counted as ``commas + opening brackets + 1`` once strings are blanked: at least
    the number of values in a valid document (each comma separates two array elements or two
    object members; a member's key is not counted). Raises the 413 ``payload_too_large`` (param
    ``body``) over `max_values`, the 422 ``invalid_request`` over `max_depth` (brackets are only
    walked once their count is known to be bounded). Invalid JSON passes through: the parser
    reports it.
    """
    stripped = _STRING.sub(b'""', body)
    structure = stripped.translate(None, _NOT_STRUCTURE)
    values = structure.count(b",") + structure.count(b"[") + structure.count(b"{") + 1
    if max_values is not None and values > max_values:
        raise ServiceError("payload_too_large", f"body: about {values} JSON values; the limit is "
                           f"{max_values} (max_json_values)", param="body")
    brackets = structure.translate(None, b",")
    deepest = max(accumulate(1 if b in (91, 123) else -1 for b in brackets), default=0)
    if deepest > max_depth:
        raise ServiceError("invalid_request", f"body: JSON nested deeper than {max_depth} levels")


class _BadJSON(ValueError):
    def __init__(self, message: str, param: str | None = None):
        super().__init__(message)
        self.param = param


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _BadJSON(f"request body: duplicated key {ascii(key)} in one JSON object (each key "
                           "may appear once)")
        out[key] = value
    return out


def _constant(name: str) -> float:
    raise _BadJSON(f"request body: {name} is not a JSON number (RFC 8259 has no NaN or Infinity)")


def _float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _BadJSON(f"request body: the number {text[:40]} is out of range (it overflows to "
                       "infinity)")
    return value


def _path(parent: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{parent}[{key}]"
    return f"{parent}.{key}" if parent else key


def _check_tree(value: Any) -> None:
    """Depth and lone surrogates, walked without recursion; errors name the field path."""
    stack: list[tuple[Any, str, int]] = [(value, "", 1)]
    while stack:
        node, path, depth = stack.pop()
        if isinstance(node, str):
            if _SURROGATE.search(node):
                raise _BadJSON(f"{path or 'body'}: text contains a lone surrogate (invalid Unicode)",
                               path or None)
            continue
        if not isinstance(node, (dict, list)):
            continue
        if depth > MAX_DEPTH:
            raise _BadJSON(f"{path or 'body'}: JSON nested deeper than {MAX_DEPTH} levels", path or None)
        if isinstance(node, dict):
            for k, v in node.items():
                if _SURROGATE.search(k):
                    raise _BadJSON(f"{path or 'body'}: a key contains a lone surrogate (invalid "
                                   "Unicode)", path or None)
            # Pushed in reverse, so the first offending field in document order is reported.
            stack.extend((v, _path(path, k), depth + 1) for k, v in reversed(node.items()))
        else:
            stack.extend((node[i], _path(path, i), depth + 1) for i in range(len(node) - 1, -1, -1))


def loads_strict(body: bytes, max_values: int | None = None) -> Any:
    """Parse a request body as strict JSON (see the module docstring); raise ServiceError.
    `max_values`: the ``max_json_values`` limit (None: not counted)."""
    check_shape(body, max_values)
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ServiceError("invalid_request", f"request body is not valid UTF-8 (byte {exc.start})") from None
    try:
        value = json.loads(text, object_pairs_hook=_pairs, parse_constant=_constant,
                           parse_float=_float)
        # Depth is already bounded by check_shape above (the same limit on the same nesting), so
        # the walk is needed only where a surrogate escape could have produced a lone surrogate.
        if _SURROGATE_ESCAPE.search(body):
            _check_tree(value)
    except _BadJSON as exc:
        raise ServiceError("invalid_request", str(exc), param=exc.param) from None
    except json.JSONDecodeError as exc:
        raise ServiceError("invalid_request", f"request body is not valid JSON: {exc.msg} at "
                           f"line {exc.lineno} column {exc.colno}") from None
    except RecursionError:
        raise ServiceError("invalid_request", f"JSON nested deeper than {MAX_DEPTH} levels") from None
    except ValueError as exc:  # e.g. an integer of more than 4300 digits
        raise ServiceError("invalid_request", f"request body is not acceptable JSON: {exc}") from None
    return value


def _is_json(content_type: str) -> bool:
    message = email.message.Message()
    message["content-type"] = content_type
    subtype = message.get_content_subtype()
    return message.get_content_maintype() == "application" and (
        subtype == "json" or subtype.endswith("+json"))


async def read_json_body(request: Request, max_values: int | None = None) -> Any:
    """Check the headers, read and parse the body (`max_values`: the ``max_json_values`` limit,
    None: not counted)."""
    content_type = request.headers.get("content-type")
    if not content_type or not _is_json(content_type):
        got = f"{content_type!r}" if content_type else "none"
        raise ServiceError("invalid_request", f"the body must be JSON sent with Content-Type: "
                           f"application/json (got {got})", param=None)
    encoding = request.headers.get("content-encoding", "identity").strip().lower()
    if encoding not in ("", "identity"):
        raise ServiceError("invalid_request", f"Content-Encoding {encoding!r} is not supported: "
                           "send the JSON body uncompressed")
    body = await request.body()
    if not body.strip():
        raise ServiceError("invalid_request", "the request body is empty; expected a JSON object")
    return loads_strict(body, max_values)


class StrictJSONRequest(Request):
    """A request whose ``json()`` is :func:`read_json_body`, parsed once (FastAPI reads a route's
    JSON body through ``json()``)."""

    max_values: int | None = None
    _parsed: Any
    _parsed_ok = False

    async def json(self) -> Any:
        if not self._parsed_ok:
            self._parsed = await read_json_body(self, self.max_values)
            self._parsed_ok = True
        return self._parsed


def strict_json_route(limits: Limits | None) -> type[APIRoute]:
    """An APIRoute class whose POST routes read their JSON body strictly (:func:`read_json_body`)
    before FastAPI validates it, counting values against ``limits.max_json_values`` (None: no
    count)."""
    counted = type("LimitedJSONRequest", (StrictJSONRequest,),
                   {"max_values": limits.max_json_values if limits is not None else None})

    class StrictJSONRoute(APIRoute):
        def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
            handler = super().get_route_handler()
            if self.body_field is None:
                return handler

            async def strict_handler(request: Request) -> Response:
                strict = counted(request.scope, request.receive)
                await strict.json()
                return await handler(strict)

            return strict_handler

    return StrictJSONRoute
