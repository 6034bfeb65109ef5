"""HTTP wiring of POST /v1/rerank and the TEI/Cohere-shaped POST /rerank.

No `from __future__ import annotations` here: FastAPI reads these annotations at runtime.
"""

from typing import Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from dialscore_server.contract.backend import Backend
from dialscore_server.contract.errors import error_responses
from dialscore_server.contract.strict_json import StrictJSONRoute
from dialscore_server.rerank.protocol import (
    RerankRequest, RerankResponse, TEIRerankRequest, TEIRerankResponse, tei_results,
)

ERRORS = error_responses("invalid_request", "unknown_model", "payload_too_large", "overloaded",
                         "timeout", "model_error")


def build_router(gw: Backend) -> APIRouter:
    """The routes, bound to the backend `gw` (nothing here imports the gateway)."""
    router = APIRouter(route_class=StrictJSONRoute)

    async def run(context, candidates, kwargs: dict[str, Any], model: str | None, nll_model: str | None):
        detector = gw.resolve(model, "classifier", "model")
        if nll_model is not None:
            gw.resolve(nll_model, "nll", "nll_model")
        reply = await gw.call_rerank(context, candidates, kwargs, detector, nll_model)
        return detector, reply.unwrap()

    @router.post("/v1/rerank", response_model=RerankResponse, responses=ERRORS,
                 summary="Order candidate replies, least contradictory first.",
                 description="score = -(w_contradiction * contradiction_probability + w_nll * nll); "
                 "higher is better. Results are sorted by score (ties keep input order), then cut "
                 "to `top_n`.")
    async def rerank(body: RerankRequest) -> RerankResponse:
        body.check_limits(gw.limits)
        detector, out = await run(body.to_context(), body.candidates, body.engine_kwargs(), body.model,
                                  body.nll_model)
        card = await gw.card(detector)
        nll_card = await gw.card(body.nll_model) if body.nll_model else None
        return RerankResponse.from_engine(out, model=detector, stand_in=card.stand_in,
                                          nll_model=body.nll_model,
                                          nll_stand_in=nll_card.stand_in if nll_card else None)

    @router.post("/rerank", response_model=TEIRerankResponse, responses=ERRORS,
                 summary="Rerank in text-embeddings-inference's shape (query = the dialogue so far).",
                 description="`query` holds one turn per line; each of `texts` is a candidate next "
                 "turn. Returns [{index, score}] best first; score = 1 - contradiction probability "
                 "(or -probability with raw_scores).")
    async def tei_rerank(body: TEIRerankRequest) -> JSONResponse:
        body.check_limits(gw.limits)
        _, out = await run(body.to_context(), body.texts, body.engine_kwargs(), body.model, None)
        return JSONResponse(list(tei_results(body, out)))

    return router
