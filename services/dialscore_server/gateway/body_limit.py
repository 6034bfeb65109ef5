"""The byte limit and the body deadline, enforced while the body is received: 413
``payload_too_large`` (param ``body``) past ``max_body_bytes``, 408 ``timeout`` when the whole body
has not arrived within ``body_timeout_s`` (a client trickling bytes holds a gateway slot, so it is
cut off and counted in ``dialscore_slow_clients_total{kind="body"}``)."""

from __future__ import annotations

import asyncio
import json

from dialscore_server.contract.errors import ServiceError


class BodySizeLimit:
    """ASGI middleware: refuse bodies over `max_bytes` with 413, counting the bytes
    actually received (a missing or false Content-Length does not get past it)."""

    def __init__(self, app, max_bytes: int, timeout_s: float | None = None):
        self.app = app
        self.max_bytes = max_bytes
        self.timeout_s = timeout_s

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        limit = self.max_bytes
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            return await _reject(send, limit)
        # Read the whole body here (bounded in bytes and time), then replay it to the app.
        chunks, size = [], 0
        loop = asyncio.get_running_loop()
        deadline = None if self.timeout_s is None else loop.time() + self.timeout_s
        while True:
            try:
                if deadline is None:
                    message = await receive()
                else:
                    message = await asyncio.wait_for(receive(), max(0.0, deadline - loop.time()))
            except TimeoutError:
                from dialscore_server import metrics

                metrics.SLOW_CLIENTS.labels("body").inc()
                return await _send_error(send, ServiceError(
                    "timeout", f"the request body did not arrive within {self.timeout_s:g} s "
                    "(body_timeout_s); send it at once", param="body"))
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
    await _send_error(send, ServiceError("payload_too_large", f"request body exceeds {limit} bytes",
                                         param="body"))


async def _send_error(send, err: ServiceError) -> None:
    payload = json.dumps(err.body()).encode()
    await send({"type": "http.response.start", "status": err.status,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(payload)).encode()),
                            (b"x-error-type", err.type.encode()),
                            *([(b"x-work-dropped", b"true")] if err.type == "timeout" else []),
                            (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": payload})
