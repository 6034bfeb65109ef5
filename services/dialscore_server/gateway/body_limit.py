"""The byte limit, enforced while the body is received (413 ``payload_too_large``, param ``body``)."""

from __future__ import annotations

import json

from dialscore_server.contract.errors import ServiceError


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
