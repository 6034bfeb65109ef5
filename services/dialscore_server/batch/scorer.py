"""One batch worker: the job's models loaded once, and the service's own scoring routes over
them, called in-process (no socket). A request line becomes the same HTTP request the service
would receive (method, url, JSON body), so its answer, numbers and error bodies included, is the
service's: the routers of :mod:`dialscore_server.nll`, :mod:`~dialscore_server.nll.completions`,
:mod:`~dialscore_server.contradiction` and :mod:`~dialscore_server.rerank`, with the error
handlers of :mod:`dialscore_server.contract.http_errors`. What the service's gateway adds and a
file does not need is left out: authentication, the body-size middleware (a line's size is the
file's business), metrics by route, and request deadlines (a job waits for its engines). Every
request asks for the bulk lane (:data:`~dialscore_server.contract.priority.PRIORITY_HEADER`), so
the serving options meant for bulk work (``bulk_max_batch``) hold as they do in a bulk pool.

:class:`BatchScorer` is also the callable class of the Ray Data stage (``map_batches``): a batch of
rows in, the same rows with their ``output`` line (JSON text) out.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Sequence
from typing import Any

from dialscore_server.batch.lines import BATCH_URLS, Request, output_line
from dialscore_server.batch.models import JobModels, build_directory
from dialscore_server.contract.priority import PRIORITY_HEADER
from dialscore_server.scheduling.device_gate import DeviceGate, device_gate

#: Base URL of the in-process calls (never resolved: the transport is the app itself).
BASE_URL = "http://batch.invalid"


def build_batch_app(directory: Any):
    """The FastAPI app of the batch routes (:data:`BATCH_URLS`) over `directory`, with the
    service's error handlers."""
    from fastapi import FastAPI

    from dialscore_server.contract import http_errors
    from dialscore_server.nll.completions.router import build_router as completions_router
    from dialscore_server.nll.router import build_router as nll_router

    app = FastAPI(title="dialscore batch")
    http_errors.install(app)
    app.include_router(nll_router(directory))
    app.include_router(completions_router(directory))
    if directory.has_classifiers:
        from dialscore_server.contradiction.router import build_router as contradiction_router
        from dialscore_server.rerank.router import build_router as rerank_router

        app.include_router(contradiction_router(directory))
        app.include_router(rerank_router(directory))
    return app


class BatchScorer:
    """The job's models and routes in this process; :meth:`score` answers request lines.
    `gate_of`: the device gates yielding models wait at (default: the node's; see
    :func:`~dialscore_server.batch.models.build_directory`)."""

    def __init__(self, models: JobModels,
                 gate_of: Callable[[str | None], DeviceGate] = device_gate):
        import httpx

        self.directory = build_directory(models, gate_of)
        self.app = build_batch_app(self.directory)
        self._loop = asyncio.new_event_loop()
        self._client = httpx.AsyncClient(transport=httpx.ASGITransport(app=self.app),
                                         base_url=BASE_URL, timeout=None)

    async def _one(self, request: Request) -> dict[str, Any]:
        response = await self._client.request(
            request.method, request.url, content=json.dumps(request.body).encode(),
            headers={"content-type": "application/json", PRIORITY_HEADER: "bulk"})
        try:
            body = response.json()
        except ValueError:
            body = {"error": {"type": "internal", "message": response.text, "param": None}}
        return output_line(request.line, request.custom_id, response.status_code, body)

    def score(self, requests: Sequence[Request]) -> list[dict[str, Any]]:
        """One output line per request, in order. The requests are sent concurrently, so their
        chunks share engine calls (the deployments' runner: batch/models.py)."""

        async def run() -> list[dict[str, Any]]:
            return list(await asyncio.gather(*(self._one(r) for r in requests)))

        return self._loop.run_until_complete(run())

    def __call__(self, batch: dict[str, Any]) -> dict[str, Any]:
        """The Ray Data stage: columns ``line, custom_id, method, url, body`` (the body as JSON
        text) in; one column, ``output`` (each row's output line as JSON text), out."""
        requests = [Request(int(line), str(cid), str(method), str(url), json.loads(body))
                    for line, cid, method, url, body in zip(
                        batch["line"], batch["custom_id"], batch["method"], batch["url"],
                        batch["body"])]
        return {"output": [json.dumps(o, ensure_ascii=False) for o in self.score(requests)]}


__all__ = ["BATCH_URLS", "BatchScorer", "build_batch_app"]
