"""The HTTP gateway: a FastAPI ingress deployment composed with the model deployments by handles.

Routes (version 1): GET /v1/models, POST /v1/nll, GET /healthz, GET /readyz, GET /metrics;
OpenAPI docs at /docs. Each endpoint's routes live in its own `api_router.py`. Every error leaves
as ``{"error": {"type", "message", "param"}}`` (services/dialscore_server/contract/errors.py); client input never produces
a 500.

The FastAPI app is built per replica, after the constructor (`__serve_build_asgi_app__`), so
routes close over the live gateway (its handles, limits and token) rather than over a copy Serve
froze at import time.
"""

import asyncio
import logging
import os
import time
from typing import Any

from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse, PlainTextResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import BaseModel, ConfigDict, Field
from ray import serve
from ray.serve.handle import DeploymentHandle

from dialscore_server import metrics
from dialscore_server.contract.errors import ServiceError, error_responses
from dialscore_server.gateway import errors as gw_errors
from dialscore_server.gateway.config import AppArgs
from dialscore_server.contract.deadline import answer
from dialscore_server.gateway.limits import BodySizeLimit, document_limits
from dialscore_server.nll.deployment import NLLDeployment

logger = logging.getLogger("dialscore.gateway")

PUBLIC_PATHS = frozenset({"/healthz", "/docs", "/openapi.json", "/docs/oauth2-redirect", "/redoc"})


def read_token(env_var: str) -> str | None:
    """The bearer token: the env var's value, or the content of the file it names as `file:PATH`."""
    value = os.environ.get(env_var, "").strip()
    if value.startswith("file:"):
        with open(value[5:], encoding="utf-8") as fh:
            value = fh.read().strip()
    return value or None


class Health(BaseModel):
    status: str = Field(description="Always `ok`: the gateway process answers.")


class Readiness(BaseModel):
    ready: bool = Field(description="True when every model deployment answered.")
    deployments: dict[str, str] = Field(description="Per model: `ok` or `unavailable: <reason>`.")


class ModelCard(BaseModel):
    """One served model's provenance (classifiers add `labels` and `contradiction_index`)."""

    model_config = ConfigDict(extra="allow", protected_namespaces=())
    name: str
    family: str = Field(description="causal, seq2seq or classifier.")
    source: str | None = Field(None, description="The checkpoint: hub id or path.")
    revision: str | None = None
    max_length: int | None = None
    dtype: str | None = None
    device: str | None = None
    stand_in: bool = Field(description="True when the model is a random-weight stand-in.")


class ModelList(BaseModel):
    models: list[ModelCard]


def create_app(gw: "Gateway") -> FastAPI:
    """The FastAPI app of one gateway replica."""
    from dialscore_server.contradiction.api_router import build_router as contradiction_router
    from dialscore_server.nll.api_router import build_router as nll_router
    from dialscore_server.rerank.api_router import build_router as rerank_router

    app = FastAPI(title="dialscore", version="1",
                  description="Per-token NLL scoring of dialogue models, contradiction detection "
                  "and reranking. Errors: {\"error\": {\"type\", \"message\", \"param\"}}.")
    gw_errors.install(app)
    app.add_middleware(BodySizeLimit, max_bytes=gw.limits.max_body_bytes)

    @app.middleware("http")
    async def observe(request: Request, call_next):
        """Authorise (when a token is set), then count and time every request."""
        start = time.perf_counter()
        path = app_path(request.scope)
        if gw.token and path not in PUBLIC_PATHS and \
                request.headers.get("authorization") != f"Bearer {gw.token}":
            response: Response = gw_errors.error_response(
                ServiceError("unauthorized", "missing or wrong bearer token"))
        else:
            response = await call_next(request)
        endpoint = path if path in known_paths else "other"  # bounded label cardinality
        metrics.REQUESTS.labels(endpoint, str(response.status_code)).inc()
        metrics.LATENCY.labels(endpoint).observe(time.perf_counter() - start)
        if "x-error-type" in response.headers:
            metrics.ERRORS.labels(endpoint, response.headers["x-error-type"]).inc()
        return response

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
        return Response(generate_latest(metrics.REGISTRY), media_type=CONTENT_TYPE_LATEST)

    # Documented, not validated on the way out: a card field of an unexpected type must not
    # turn GET /v1/models into a 500.
    @app.get("/v1/models", summary="The models this deployment serves, with provenance.",
             response_model=None, responses={200: {"model": ModelList, "description": "The models."},
                                             **error_responses("overloaded", "timeout", "model_error")})
    async def models() -> dict:
        return {"models": list(await asyncio.gather(*(gw.card(m) for m in gw.models)))}

    app.include_router(nll_router(gw))
    if gw.classifiers:
        app.include_router(contradiction_router(gw))
        app.include_router(rerank_router(gw))
    install_openapi(app, gw)
    # Metric labels are limited to documented routes (included routers do not list their
    # routes in app.routes, the OpenAPI schema does).
    known_paths = set(app.openapi()["paths"])
    return app


def app_path(scope) -> str:
    """The request path inside this app (without the route prefix it is served under)."""
    path, root = scope.get("path", ""), scope.get("root_path", "")
    if root and path.startswith(root):
        path = path[len(root):] or "/"
    return path


def install_openapi(app: FastAPI, gw: "Gateway") -> None:
    """The OpenAPI document says what the service really does: this deployment's limits
    (services/dialscore_server/gateway/limits.py:document_limits), and the 401 of every guarded route when auth
    is on. Auth state and limits are per deployment, so the document is built per replica."""
    base = app.openapi

    def openapi() -> dict:
        if app.openapi_schema is None:
            spec = document_limits(base(), gw.limits)
            if gw.token:
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
            app.openapi_schema = spec
        return app.openapi_schema

    app.openapi = openapi


@serve.deployment(name="gateway", max_ongoing_requests=256)
@serve.ingress()
class Gateway:
    """Routes HTTP requests to the model deployments; holds no model itself."""

    def __init__(self, nll: dict[str, DeploymentHandle], args: dict[str, Any],
                 classifiers: dict[str, DeploymentHandle] | None = None,
                 reranker: DeploymentHandle | None = None):
        self.args = AppArgs.model_validate(args)
        self.nll = nll
        self.classifiers = classifiers or {}
        self.models = {**nll, **self.classifiers}  # every servable model by name
        self.reranker = reranker
        self.limits = self.args.limits
        self.timeout = self.args.request_timeout_s
        self.queue_timeout = self.args.queue_timeout_s
        self.token = read_token(self.args.auth_token_env)
        self._cards: dict[str, dict] = {}

    def __serve_build_asgi_app__(self) -> FastAPI:
        return create_app(self)

    def resolve(self, model: str | None, family: str, param: str) -> str:
        """The served model for a request's `model` field: `family` "nll" (causal/seq2seq) or
        "classifier"; None picks the default classifier. Unknown → 404 naming `param`."""
        pool = self.nll if family == "nll" else self.classifiers
        if model is None and family == "classifier" and pool:
            return next(iter(pool))
        if model not in pool:
            kind = "dialogue (NLL) model" if family == "nll" else "classifier"
            raise ServiceError("unknown_model", f"unknown {kind} {model!r}; served: "
                               f"{', '.join(sorted(pool)) or 'none'}", param=param)
        return model

    async def call(self, model: str, method: str, *args, **kwargs):
        """Call a model deployment's method under the request deadline; Ray errors → ServiceError."""
        handle = self.models.get(model)
        if handle is None:
            raise ServiceError("unknown_model", f"unknown model {model!r}; served: "
                               f"{', '.join(sorted(self.models))}", param="model")
        return await self._guarded(model, getattr(handle, method).remote(*args, **kwargs))

    async def call_rerank(self, *args):
        return await self._guarded("rerank", self.reranker.rerank.remote(*args))

    async def _guarded(self, label: str, pending):
        metrics.IN_FLIGHT.labels(label).inc()
        try:
            return await answer(pending, self.timeout, self.queue_timeout)
        except ServiceError:
            raise
        except Exception as exc:  # noqa: BLE001 - every Ray failure maps to a typed error
            raise gw_errors.from_ray(exc) from None
        finally:
            metrics.IN_FLIGHT.labels(label).dec()

    async def card(self, model: str) -> dict:
        """The model's card (cached after the first answer)."""
        if model not in self._cards:
            self._cards[model] = await self.call(model, "info")
        return self._cards[model]

    async def readiness(self) -> dict[str, str]:
        async def probe(model: str) -> str:
            try:
                await answer(self.models[model].info.remote(), 5.0, None)
                return "ok"
            except Exception as exc:  # noqa: BLE001 - reported, not raised
                return f"unavailable: {type(exc).__name__}"

        names = list(self.models)
        return dict(zip(names, await asyncio.gather(*(probe(m) for m in names))))


def build_app(args: AppArgs) -> serve.Application:
    """The Serve application for `args` (Serve YAML: `import_path: dialscore_server.gateway.app:build_app`)."""
    from dialscore_server.contradiction.deployment import ContradictionDeployment
    from dialscore_server.rerank.deployment import RerankDeployment

    nll = {cfg.name: NLLDeployment.options(**_options(f"nll-{cfg.name}", opts)).bind(
        cfg.model_dump(), token_budget=opts.token_budget, max_batch_tokens=opts.max_batch_tokens,
        batch_wait_timeout_s=opts.batch_wait_timeout_s, num_threads=opts.num_threads,
        prefix_reuse=opts.prefix_reuse, fast_kernels=opts.fast_kernels,
    ) for cfg, opts in args.model_configs()}
    classifiers = {cfg.name: ContradictionDeployment.options(**_options(f"nli-{cfg.name}", opts)).bind(
        cfg.model_dump(), token_budget=opts.token_budget,
        max_batch_pairs=min(opts.max_batch_tokens, 4096),
        batch_wait_timeout_s=opts.batch_wait_timeout_s, num_threads=opts.num_threads,
    ) for cfg, opts in args.classifier_configs()}
    reranker = RerankDeployment.options(
        ray_actor_options={"num_cpus": args.rerank_num_cpus}).bind(
            classifiers, nll, request_timeout_s=args.request_timeout_s,
            queue_timeout_s=args.queue_timeout_s) if classifiers else None
    return Gateway.options(
        num_replicas=args.gateway_replicas, ray_actor_options={"num_cpus": args.gateway_num_cpus},
        max_ongoing_requests=args.gateway_max_ongoing_requests,
        max_queued_requests=args.gateway_max_queued_requests,
        backpressure_config={"status_code": 503, "retry_after_s": 1.0},
    ).bind(nll, args.model_dump(), classifiers, reranker)


def _options(name: str, opts) -> dict[str, Any]:
    """Serve deployment options of one model deployment (`cfg.name` is the served name)."""
    options: dict[str, Any] = dict(
        name=name, max_ongoing_requests=opts.max_ongoing_requests,
        max_queued_requests=opts.max_queued_requests,
        ray_actor_options={"num_cpus": opts.num_cpus, "num_gpus": opts.num_gpus},
    )
    if opts.autoscaling_config:
        options["autoscaling_config"] = opts.autoscaling_config
    else:
        options["num_replicas"] = opts.num_replicas
    return options
