"""HTTP wiring of POST /v1/nll (schemas in protocol.py, the work in engine.py/deployment.py).

No `from __future__ import annotations` here: FastAPI reads these annotations at runtime.
"""

from fastapi import APIRouter, Response

from dialscore_server import metrics
from dialscore_server.contract.errors import ServiceError, error_responses
from dialscore_server.contract.strict_json import StrictJSONRoute
from dialscore_server.gateway.limits import check_nll_limits
from dialscore_server.nll.deployment import ScoreReply
from dialscore_server.nll.protocol import NLLRequest, NLLResponse, NLLResultOut, Usage


def build_router(gw) -> APIRouter:
    """Routes bound to a :class:`~dialscore_server.gateway.app.Gateway` instance `gw`."""
    router = APIRouter(route_class=StrictJSONRoute)

    @router.post("/v1/nll", response_model=NLLResponse,
                 summary="Per-token NLL of each target given its context.",
                 description="`nll` is the mean over the target's tokens (nats per token); the "
                 "eos token is appended and scored when the model's format says so (`append_eos`). "
                 "Results keep the order of `items`.",
                 responses=error_responses("invalid_request", "unknown_model", "payload_too_large",
                                           "overloaded", "timeout", "model_error"))
    async def nll(body: NLLRequest, response: Response) -> NLLResponse:
        check_nll_limits(body, gw.limits)
        gw.resolve(body.model, "nll", "model")
        reply: ScoreReply = await gw.call(body.model, "score", [it.to_item() for it in body.items],
                                          body.return_tokens)
        if reply.error:
            raise ServiceError(**reply.error)
        card = await gw.card(body.model)
        record_batch(body.model, reply)
        response.headers["x-compute-time"] = f"{reply.compute_s:.4f}"
        response.headers["x-queue-time"] = f"{reply.queue_s:.4f}"
        results = [
            NLLResultOut(
                nll=r.nll, num_tokens=r.num_tokens, truncated=r.truncated,
                token_nlls=r.token_nlls if body.return_tokens else None,
                tokens=reply.tokens[i] if body.return_tokens and reply.tokens else None,
            )
            for i, r in enumerate(reply.results)
        ]
        return NLLResponse(
            model=body.model, source=card["source"], revision=card["revision"],
            stand_in=card["stand_in"], append_eos=card["format"]["append_eos"], results=results,
            usage=Usage(source_tokens=sum(r.source_tokens for r in reply.results),
                        target_tokens=sum(r.num_tokens for r in reply.results)),
        )

    return router


def record_batch(model: str, reply: ScoreReply) -> None:
    """Count items and tokens; observe batch figures once per engine call."""
    metrics.ITEMS.labels(model).inc(len(reply.results))
    metrics.TOKENS.labels(model, "source").inc(sum(r.source_tokens for r in reply.results))
    metrics.TOKENS.labels(model, "target").inc(sum(r.num_tokens for r in reply.results))
    if reply.batch is not None:  # the first request of each engine call carries its stats
        metrics.BATCH_SIZE.labels(model).observe(reply.batch.items)
        metrics.BATCH_REQUESTS.labels(model).observe(reply.batch_requests)
        metrics.BATCH_TOKENS.labels(model).observe(reply.batch.real_tokens)
        metrics.PADDING_WASTE.labels(model).observe(reply.batch.padding_waste)
        metrics.REUSED_TOKENS.labels(model).inc(reply.batch.reused_tokens)
