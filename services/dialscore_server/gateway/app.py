"""The gateway's FastAPI app: the routes of every endpoint on one ingress (no Ray here).

Routes (version 1): GET /v1/models, POST /v1/nll, POST /v1/completions (OpenAI/vLLM shape),
GET /tokenizer_info, POST /tokenize, POST /detokenize (vLLM shapes),
POST /v1/contradiction, POST /v1/rerank, POST /rerank (TEI shape), POST /v2/rerank (Cohere v2
shape), GET /healthz, GET /readyz, GET /metrics; OpenAPI docs at /docs. Each endpoint's routes live
in its own `router.py` and reach the models through the backend they are given. Every error leaves
as ``{"error": {"type", "message", "param"}}`` (contract/errors.py); client input never produces a
500.

:func:`create_app` takes an :class:`Ingress`: a
:class:`~dialscore_server.directory.ModelDirectory`, over typed Serve handles in the gateway
deployment (gateway/deployment.py), over in-process servings in tests.
"""

import asyncio
import time
from typing import Protocol

from fastapi import FastAPI, Response
from fastapi.responses import JSONResponse, PlainTextResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import BaseModel, Field

from dialscore_server.metric_recording import REGISTRY
from dialscore_server.contract.errors import error_responses
from dialscore_server.contradiction.router import build_router as contradiction_router
from dialscore_server.contradiction.serving import ClassifierBackend
from dialscore_server.contract import http_errors
from dialscore_server.gateway.body_limit import BodySizeLimit
from dialscore_server.contract.host_check import AllowedHosts
from dialscore_server.gateway.model_listing import ModelList, model_list
from dialscore_server.gateway.observe import ObserveRequests
from dialscore_server.gateway.openapi import install_openapi
from dialscore_server.nll.completions.router import build_router as completions_router
from dialscore_server.nll.dialogues.router import build_router as dialogues_router
from dialscore_server.nll.tokenizer.router import build_router as tokenizer_router
from dialscore_server.nll.router import build_router as nll_router
from dialscore_server.nll.serving import NLLBackend
from dialscore_server.rerank.cohere.router import build_router as cohere_rerank_router
from dialscore_server.rerank.router import build_router as rerank_router
from dialscore_server.rerank.serving import RerankBackend
from dialscore_server.rerank.tei.router import build_router as tei_rerank_router


class Ingress(NLLBackend, ClassifierBackend, RerankBackend, Protocol):
    """What the app needs of its gateway besides the routers' backends."""

    token: str | None
    #: The Host check while auth is off (None: none; contract/host_check.py).
    allowed_hosts: AllowedHosts | None
    #: Seconds the whole body may take to arrive (None: no limit).
    body_timeout_s: float | None
    #: Every served model by name, dialogue models first; and whether any is a classifier.
    model_names: list[str]
    has_classifiers: bool

    async def readiness(self) -> dict[str, str]:
        """Per model: ``ok`` or ``unavailable: <reason>``."""
        ...


class Health(BaseModel):
    status: str = Field(description="Always `ok`: the gateway process answers.")


class Readiness(BaseModel):
    ready: bool = Field(description="True when every model deployment answered.")
    deployments: dict[str, str] = Field(description="Per model: `ok` or `unavailable: <reason>`.")


def create_app(gw: Ingress) -> FastAPI:
    """The FastAPI app of one gateway replica."""
    app = FastAPI(title="dialscore", version="1",
                  description="Per-token NLL scoring of dialogue models, contradiction detection "
                  "and reranking. Errors: {\"error\": {\"type\", \"message\", \"param\"}}.")
    http_errors.install(app)
    app.add_middleware(BodySizeLimit, max_bytes=gw.limits.max_body_bytes,
                       timeout_s=gw.body_timeout_s)

    # Outermost of the app's own middleware (added last): check Host, authorise, then count and
    # time.
    known_paths: set[str] = set()
    app.add_middleware(ObserveRequests, token_of=lambda: gw.token, known_paths=known_paths,
                       allowed_hosts_of=lambda: gw.allowed_hosts)

    @app.get("/healthz", summary="The gateway process is alive.", response_model=Health)
    async def healthz() -> dict:
        return {"status": "ok"}

    @app.get("/readyz", summary="Every model deployment answers (503 otherwise).", response_model=None,
             responses={200: {"model": Readiness, "description": "Ready."},
                        503: {"model": Readiness, "description": "A model deployment did not answer."}})
    async def readyz() -> JSONResponse:
        status = await gw.readiness()
        ready = all(v == "ok" for v in status.values())
        return JSONResponse({"ready": ready, "deployments": status}, status_code=200 if ready else 503)

    @app.get("/metrics", summary="Prometheus metrics (text format).", response_class=PlainTextResponse)
    async def prometheus() -> Response:
        return Response(generate_latest(REGISTRY), media_type=CONTENT_TYPE_LATEST)

    # Documented, not validated on the way out: a card field of an unexpected type must not
    # turn GET /v1/models into a 500.
    started = int(time.time())

    @app.get("/v1/models", summary="The models this deployment serves, with provenance, in "
             "dialscore's shape (`models`) and OpenAI's (`object`, `data`).",
             response_model=None, responses={200: {"model": ModelList, "description": "The models."},
                                             **error_responses("overloaded", "timeout", "model_error")})
    async def models() -> dict:
        cards = await asyncio.gather(*(gw.card(m) for m in gw.model_names))
        return model_list(list(cards), started)

    app.include_router(nll_router(gw))
    app.include_router(dialogues_router(gw))
    app.include_router(completions_router(gw))
    app.include_router(tokenizer_router(gw))
    if gw.has_classifiers:
        app.include_router(contradiction_router(gw))
        app.include_router(rerank_router(gw))
        app.include_router(tei_rerank_router(gw))
        app.include_router(cohere_rerank_router(gw))
    install_openapi(app, gw.limits, gw.token, gw.allowed_hosts)
    # Metric labels are limited to documented routes (included routers do not list their
    # routes in app.routes, the OpenAPI schema does).
    known_paths.update(app.openapi()["paths"])
    return app
