"""Request size limits, enforced before anything is parsed or tokenized (413 `payload_too_large`)."""

from __future__ import annotations

import json

from dialscore_server.contract.errors import ServiceError
from dialscore_server.nll.protocol import NLLRequest
from dialscore_server.contract.schema import Limits


class BodySizeLimit:
    """ASGI middleware: refuse bodies over `max_bytes` with 413, counting the bytes
    actually received (a missing or false Content-Length does not get past it)."""

    def __init__(self, app, max_bytes: int):
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        limit = self.max_bytes
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            return await _reject(send, limit)
        # Read the whole body here (bounded), then replay it to the app.
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                return await _reject(send, limit)
            chunks.append(chunk)
            if not message.get("more_body"):
                break
        body = b"".join(chunks)
        sent = False

        async def replay():
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        return await self.app(scope, replay, send)


async def _reject(send, limit: int) -> None:
    err = ServiceError("payload_too_large", f"request body exceeds {limit} bytes", param="body")
    payload = json.dumps(err.body()).encode()
    await send({"type": "http.response.start", "status": err.status,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(payload)).encode()),
                            (b"x-error-type", err.type.encode())]})
    await send({"type": "http.response.body", "body": payload})


def too_many(param: str, n: int, limit: int, what: str) -> ServiceError:
    return ServiceError("payload_too_large", f"{param}: {n} {what}; the limit is {limit}", param=param)


def check_text(param: str, text: str | None, limits: Limits) -> None:
    if text is not None and len(text) > limits.max_text_chars:
        raise ServiceError("payload_too_large", f"{param}: {len(text)} characters; the limit is "
                           f"{limits.max_text_chars}", param=param)


def check_nll_limits(body: NLLRequest, limits: Limits) -> None:
    """Items per request, turns per context, characters per text."""
    if len(body.items) > limits.max_items:
        raise too_many("items", len(body.items), limits.max_items, "items")
    for i, item in enumerate(body.items):
        if item.context is not None and len(item.context) > limits.max_turns:
            raise too_many(f"items[{i}].context", len(item.context), limits.max_turns, "turns")
        for name, text in item.texts():
            check_text(f"items[{i}].{name}", text, limits)


# ------------------------------------------------------------------------ OpenAPI documentation

_LIMIT_WORDS = {
    "max_items": "items per request",
    "max_turns": "turns per context or dialogue",
    "max_text_chars": "characters per text",
    "max_dialogues": "dialogues per request",
    "max_candidates": "candidates per rerank request",
}


def _limit_names(node, spec: dict, seen: set[str] | None = None) -> list[str]:
    """The `x-limit` names reachable from a schema node (following $refs), in first-seen order."""
    seen = set() if seen is None else seen
    out: list[str] = []
    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, list):
            stack.extend(reversed(n))
        elif isinstance(n, dict):
            ref = n.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/components/schemas/") and ref not in seen:
                seen.add(ref)
                stack.append(spec["components"]["schemas"][ref.rsplit("/", 1)[1]])
            mark = n.get("x-limit")
            for name in mark if isinstance(mark, list) else [mark]:
                name = name.get("name") if isinstance(name, dict) else name
                if isinstance(name, str) and name not in out:
                    out.append(name)
            stack.extend(reversed([v for k, v in n.items() if k != "x-limit"]))
    return out


def document_limits(spec: dict, limits: Limits) -> dict:
    """Put this deployment's limits into its OpenAPI document, in place:

    * every schema node marked ``"x-limit": NAME`` (see dialscore_server.contract.schema.LimitedBy) gets
      ``maxItems``/``maxLength`` = the configured value and ``"x-limit": {"name", "value"}``;
      a request over it is still answered 413 ``payload_too_large`` naming the field (not 422):
      the schema documents the bound, the gateway enforces it;
    * each operation with a request body gets the limits it is subject to appended to its
      description, with ``max_body_bytes``, and ``"x-limits": {NAME: value}``;
    * the 413 response says what it is for; ``info`` carries every limit as ``x-limits``.
    """
    values = limits.model_dump()
    stack: list = [spec.get("components", {})]
    while stack:
        node = stack.pop()
        if isinstance(node, list):
            stack.extend(node)
            continue
        if not isinstance(node, dict):
            continue
        name = node.get("x-limit")
        if isinstance(name, list):  # documented only: the limits apply inside the value
            node["x-limit"] = [{"name": n, "value": values[n], "status": 413,
                                "error": "payload_too_large"} for n in name if n in values]
        elif isinstance(name, str) and name in values:
            value = values[name]
            branches = [node] + [b for b in node.get("anyOf", []) if isinstance(b, dict)]
            for b in branches:
                if b.get("type") == "array":
                    b["maxItems"] = value
                elif b.get("type") == "string":
                    b["maxLength"] = value
            node["x-limit"] = {"name": name, "value": value, "status": 413,
                               "error": "payload_too_large"}
        stack.extend(v for k, v in node.items() if k != "x-limit")

    body_limit = f"at most {limits.max_body_bytes} bytes of body (`max_body_bytes`, param `body`)"
    for path_item in spec.get("paths", {}).values():
        for op in path_item.values():
            if not isinstance(op, dict) or "requestBody" not in op:
                continue
            names = _limit_names(op["requestBody"], spec)
            parts = [f"at most {values[n]} {_LIMIT_WORDS.get(n, n)} (`{n}`)" for n in names]
            parts.append(body_limit)
            op["description"] = (op.get("description", "").rstrip() + "\n\n**Limits of this "
                                 "deployment**, checked before anything is tokenized; each violation "
                                 "is a 413 `payload_too_large` whose `param` names the field: "
                                 + "; ".join(parts) + ".").strip()
            op["x-limits"] = {n: values[n] for n in names + ["max_body_bytes"]}
            if "413" in op.get("responses", {}):
                op["responses"]["413"]["description"] = (
                    "payload_too_large: a limit of this deployment was exceeded (see the "
                    "description); `param` names the field, or `body` for the byte limit")
    info = spec.setdefault("info", {})
    info["x-limits"] = values
    return spec
