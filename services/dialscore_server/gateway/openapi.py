"""The OpenAPI document says what this deployment really does: its limits and its auth."""

from __future__ import annotations

from fastapi import FastAPI

from dialscore_server.contract.limits import Limits
from dialscore_server.gateway.auth import PUBLIC_PATHS
from dialscore_server.contract.host_check import AllowedHosts


_LIMIT_WORDS = {
    "max_items": "items per request",
    "max_turns": "turns per context or dialogue",
    "max_text_chars": "characters per text",
    "max_dialogues": "dialogues per request",
    "max_candidates": "candidates per rerank request",
    "max_request_pairs": "NLI pairs of work per request (param: the list that makes them)",
    "max_request_tokens": "NLL token positions of work per request (param: the list that makes them)",
    "max_item_tokens": "token positions counted per NLL item, at most",
    "max_id_chars": "characters per turn id or speaker",
    "max_evidence": "evidence turns per result (the most probable; not an error)",
    "max_json_values": "JSON values per body, counted before parsing (param `body`)",
}
#: Limits every body is subject to, besides those its schema and route declare.
_EVERY_BODY = ["max_json_values"]


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
            # A route declares its cost limits with openapi_extra={"x-cost-limits": [...]}.
            names = _limit_names(op["requestBody"], spec) + op.pop("x-cost-limits", []) + _EVERY_BODY
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


def install_openapi(app: FastAPI, limits: Limits, token: str | None,
                    allowed_hosts: AllowedHosts | None = None) -> None:
    """Make `app`'s OpenAPI document say what this deployment really does: its limits
    (:func:`document_limits`), when auth is on the 401 of every guarded route, and when the Host
    check applies (auth off, `allowed_hosts` set and not ``*``: contract/host_check.py) the 403 of
    every route. All are per deployment, so the document is built per replica."""
    base = app.openapi

    def openapi() -> dict:
        if app.openapi_schema is None:
            spec = document_limits(base(), limits)
            if token:
                spec.setdefault("components", {}).setdefault("securitySchemes", {})["bearer"] = {
                    "type": "http", "scheme": "bearer"}
                for path, item in spec.get("paths", {}).items():
                    if path in PUBLIC_PATHS:
                        continue
                    for op in item.values():
                        op.setdefault("security", [{"bearer": []}])
                        op.setdefault("responses", {})["401"] = {
                            "description": "unauthorized: missing or wrong bearer token",
                            # ErrorResponse is in the document: every POST route answers it.
                            "content": {"application/json": {"schema": {
                                "$ref": "#/components/schemas/ErrorResponse"}}}}
            if not token and allowed_hosts is not None and not allowed_hosts.any:
                for item in spec.get("paths", {}).values():
                    for op in item.values():
                        op.setdefault("responses", {})["403"] = {
                            "description": "host_not_allowed: the Host header is not a loopback "
                            "name or address nor an allowed host",
                            "content": {"application/json": {"schema": {
                                "$ref": "#/components/schemas/ErrorResponse"}}}}
            app.openapi_schema = spec
        return app.openapi_schema

    app.openapi = openapi
